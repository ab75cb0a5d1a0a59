"""The ``dynacommit`` data source without a JVM: options, filter conversion, read planning and pruning,
the streaming source's offsets and the sink's commit, all on in-process (``memory://``) tables. Spark
drives the same objects in the slow suites."""

from __future__ import annotations

import pickle

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark.sql.datasource import (
    CaseInsensitiveDict,
    EqualNullSafe,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    Not,
    StringContains,
    StringStartsWith,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxFiles

from logstore import ConfigurationError, StorageOptions, TableUri, open_object_store
from logstore.errors import InvalidArgumentError
from spark_integration.datasource import DynacommitDataSource
from spark_integration.filters import to_expression
from spark_integration.options import (
    parse_read,
    parse_sink,
    parse_stream_read,
    parse_write,
)
from spark_integration.read import ReadPartition, plan_read_tasks
from spark_integration.streaming import StreamMessage
from spark_integration.write import StageTask
from table.data.write import write_table
from table.errors import ChangeCommitError
from table.log.actions import AddFile
from table.table import Table


def spark_options(**options: str) -> CaseInsensitiveDict:
    """Options as Spark hands them to a Python data source: keys lower-cased."""
    return CaseInsensitiveDict(options)


# --- options ------------------------------------------------------------------------------------------


def test_write_options_are_matched_case_insensitively_and_mapped_back_to_their_names():
    parsed = parse_write(spark_options(path="s3://b/t", aws_region="eu-west-1", AWS_ALLOW_HTTP="true",
                                       aws_endpoint_url="http://127.0.0.1:9", PARTITIONBY=" day , kind ",
                                       partitionoverwritemode="DYNAMIC", txnappid="nightly", txnversion="7",
                                       targetfilesize="1048576"))
    assert parsed.uri == "s3://b/t"
    assert parsed.storage == StorageOptions.resolve({"AWS_REGION": "eu-west-1", "AWS_ALLOW_HTTP": "true",
                                                     "AWS_ENDPOINT_URL": "http://127.0.0.1:9"})
    assert parsed.partition_by == ("day", "kind")
    assert (parsed.partition_overwrite, parsed.app_id, parsed.app_version) == ("dynamic", "nightly", 7)
    assert parsed.target_file_size == 1048576 and parsed.schema_mode is None


@pytest.mark.parametrize(("options", "schema_mode"), [
    ({"mergeschema": "TRUE"}, "merge"), ({"overwriteSchema": "true"}, "overwrite"),
    ({"mergeSchema": "true", "overwriteSchema": "true"}, "overwrite"), ({"mergeSchema": "false"}, None),
])
def test_merge_schema_and_overwrite_schema_choose_the_schema_mode(options, schema_mode):
    assert parse_write(spark_options(path="s3://b/t", **options)).schema_mode == schema_mode


def test_schema_options_are_refused_where_they_do_not_apply():
    with pytest.raises(InvalidArgumentError, match="an option of batch writes"):
        parse_sink(spark_options(path="s3://b/t", checkpointLocation="/cp", mergeSchema="true"))
    with pytest.raises(InvalidArgumentError, match="an option of batch overwrites"):
        parse_read(spark_options(path="s3://b/t", overwriteSchema="true"))


@pytest.mark.parametrize(("options", "message"), [
    ({"path": "s3://b/t", "compresion": "zstd"}, "unknown option 'compresion' for a dynacommit batch write"),
    ({"path": "s3://b/t", "compression": "lzo"}, "option compression: unknown compression 'lzo'"),
    ({"path": "s3://b/t", "mergeSchema": "sometimes"}, "mergeSchema must be 'true' or 'false'"),
    ({"path": "s3://b/t", "replaceWhere": " "}, "option replaceWhere is empty"),
    ({"path": "s3://b/t", "replaceOn": ""}, "option replaceOn is empty"),
    ({"path": "s3://b/t", "txnAppId": "job"}, "txnAppId and txnVersion go together"),
    ({"path": "s3://b/t", "txnAppId": "job", "txnVersion": "-1"}, "txnVersion must be at least 0"),
    ({"path": "s3://b/t", "partitionOverwriteMode": "sometimes"}, "must be 'static' or 'dynamic'"),
    ({"path": "s3://b/t", "partitionBy": "a,a"}, "names a column twice"),
    ({"aws_region": "x"}, "no table URI"),
])
def test_bad_write_options_are_refused_by_name(options, message):
    with pytest.raises(InvalidArgumentError, match=message):
        parse_write(spark_options(**options))


def test_replace_on_options_are_read_under_delta_s_names_in_any_case():
    parsed = parse_write(spark_options(path="s3://b/t", replaceon="t.id <=> s.id", TARGETALIAS="t", sourceAlias="s"))
    assert (parsed.replace_on, parsed.target_alias, parsed.source_alias) == ("t.id <=> s.id", "t", "s")
    assert parse_write(spark_options(path="s3://b/t", replaceUsing="id, day")).replace_using == "id, day"


def test_a_bad_storage_option_value_is_a_configuration_error():
    with pytest.raises(ConfigurationError, match="AWS_ALLOW_HTTP"):
        parse_write(spark_options(path="s3://b/t", aws_allow_http="perhaps"))


def test_each_use_accepts_its_own_options_only():
    assert parse_read(spark_options(path="s3://b/t", versionasof="3")).version == 3
    with pytest.raises(InvalidArgumentError, match="startingVersion is a change feed option: add readChangeFeed"):
        parse_read(spark_options(path="s3://b/t", startingVersion="3"))
    with pytest.raises(InvalidArgumentError, match="'maxfilespertrigger' for a dynacommit batch read"):
        parse_read(spark_options(path="s3://b/t", maxFilesPerTrigger="3"))
    stream = parse_stream_read(spark_options(path="s3://b/t", startingversion="LATEST", skipchangecommits="TRUE"))
    assert (stream.starting_version, stream.skip_change_commits, stream.max_files_per_trigger) == ("latest", True, 1000)
    assert parse_stream_read(spark_options(path="s3://b/t", startingVersion="4")).starting_version == 4
    with pytest.raises(InvalidArgumentError, match="time travel does not apply to streams"):
        parse_stream_read(spark_options(path="s3://b/t", versionAsOf="1"))
    with pytest.raises(InvalidArgumentError, match="query id"):
        parse_sink(spark_options(path="s3://b/t", checkpointLocation="/cp", txnAppId="x"))
    assert parse_sink(spark_options(path="s3://b/t", checkpointlocation="/cp")).checkpoint_location == "/cp"


# --- filters ------------------------------------------------------------------------------------------

SCHEMA = pa.schema([("i", pa.int64()), ("s", pa.string()), ("f", pa.float64()), ("d", pa.date32()),
                    ("ts", pa.timestamp("us", tz="UTC")), ("b", pa.bool_())])
ROWS = pa.table({"i": pa.array([1, 2, None, 4], pa.int64()), "s": ["apple", "apricot", None, "banana"],
                 "f": [1.0, float("nan"), None, 2.0], "d": pa.array([0, 1, 2, None], pa.int32()).cast(pa.date32()),
                 "ts": pa.array([0, 10**6, None, 3 * 10**6], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                 "b": [True, False, None, True]})


def kept(filter) -> list:
    expression = to_expression(filter, SCHEMA)
    assert expression is not None, f"{filter} was not converted"
    return ROWS.filter(expression).column("i").to_pylist()


def test_filters_keep_the_rows_spark_keeps_nulls_included():
    import datetime as dt

    assert kept(EqualTo(("i",), 2)) == [2]
    assert kept(Not(EqualTo(("i",), 2))) == [1, 4]  # a null row is dropped by both, negated or not
    assert kept(GreaterThan(("i",), 1)) == [2, 4]
    assert kept(In(("s",), ["apple", None])) == [1]  # s IN ('apple', NULL): null, not true, elsewhere
    assert kept(IsNull(("s",))) == [None]
    assert kept(IsNotNull(("s",))) == [1, 2, 4]
    assert kept(StringStartsWith(("s",), "ap")) == [1, 2]
    assert kept(Not(StringStartsWith(("s",), "ap"))) == [4]
    assert kept(StringContains(("s",), "an")) == [4]
    assert kept(EqualNullSafe(("i",), None)) == [None]
    assert kept(Not(EqualNullSafe(("i",), 2))) == [1, None, 4]  # NOT (i <=> 2) is true for a null i
    assert kept(EqualTo(("d",), dt.date(1970, 1, 2))) == [2]
    assert kept(LessThan(("ts",), dt.datetime(1970, 1, 1, 0, 0, 2, tzinfo=dt.timezone.utc))) == [1, 2]
    assert kept(EqualTo(("b",), True)) == [1, 4]


@pytest.mark.parametrize("filter", [
    GreaterThan(("f",), 1.5),                     # NaN: Spark says greater than any number, pyarrow false
    EqualTo(("f",), 1.0),
    Not(In(("s",), ["apple", None])),             # never true in Spark, true for 'banana' in pyarrow
    EqualTo(("i",), 1.5),                         # not an integer literal
    EqualTo(("d",), "1970-01-02"),                # a string for a date
    LessThan(("ts",), __import__("datetime").datetime(1970, 1, 1)),  # naive literal for an instant column
    EqualTo(("nested", "x"), 1),
    EqualTo(("missing",), 1),
])
def test_filters_without_an_exact_pyarrow_meaning_are_left_to_spark(filter):
    assert to_expression(filter, SCHEMA) is None


def test_starts_with_also_gives_statistics_a_range():
    expression = to_expression(StringStartsWith(("s",), "ap"), SCHEMA)
    assert str(pc.field("s") >= "ap") in str(expression) and str(pc.field("s") < "aq") in str(expression)


# --- read planning ------------------------------------------------------------------------------------


def add(path: str, size: int) -> AddFile:
    return AddFile(path=path, partition_values={}, size=size, modification_time=0, data_change=True)


def test_read_tasks_hold_every_file_once_and_balance_bytes():
    files = [add(f"f{i}", size) for i, size in enumerate([100, 90, 50, 40, 30, 10, 5, 5])]
    tasks = plan_read_tasks(files, target_bytes=120)
    assert sorted(f.path for t in tasks for f in t) == sorted(f.path for f in files)
    assert len(tasks) == 3
    assert max(sum(f.size for f in t) for t in tasks) <= 120
    assert plan_read_tasks(files[:1], target_bytes=1) == [[files[0]]]
    assert len(plan_read_tasks(files, target_bytes=10_000, min_tasks=4)) == 4  # small files still use every core
    assert len(plan_read_tasks(files[:2], target_bytes=10_000, min_tasks=4)) == 2
    assert plan_read_tasks([], min_tasks=4) == []


def test_open_cost_spreads_many_small_files_over_tasks_deterministically():
    files = [add(f"part-{i:06d}", 1000 + i % 7) for i in range(50_000)]
    tasks = plan_read_tasks(files, target_bytes=64 * 1024 * 1024, open_cost=4 * 1024 * 1024)
    assert len(tasks) == -(-sum(f.size + 4 * 1024 * 1024 for f in files) // (64 * 1024 * 1024))
    assert sorted(f.path for t in tasks for f in t) == sorted(f.path for f in files)
    assert max(map(len, tasks)) - min(map(len, tasks)) <= 1
    assert tasks == plan_read_tasks(list(reversed(files)), target_bytes=64 * 1024 * 1024, open_cost=4 * 1024 * 1024)


def three_partition_table(uri: str, commits: int = 3) -> None:
    for c in range(commits):
        ids = pa.array(range(c * 30, (c + 1) * 30), pa.int64())
        write_table(uri, pa.table({"id": ids, "p": pa.compute.cast(pa.compute.divide(ids, 10), pa.int32()),
                                   "s": [f"v{i}" for i in ids.to_pylist()]}).select(["id", "p", "s"]),
                    partition_by=["p"])


def planned(ds: DynacommitDataSource, filters: list) -> tuple[list, list[ReadPartition]]:
    schema = ds.schema()
    reader = ds.reader(schema)
    left = list(reader.pushFilters(filters))
    reader = pickle.loads(pickle.dumps(reader))  # what Spark ships to the tasks: nothing of the files
    return left, reader.partitions(), reader


def rows(reader, partitions) -> list[int]:
    return sorted(i for p in partitions for b in reader.read(p) for i in b.column("id").to_pylist())


def test_a_filtered_read_plans_only_the_files_that_can_hold_matching_rows(memory_uri):
    three_partition_table(memory_uri)
    every_file = Table(memory_uri).add_actions()
    ds = DynacommitDataSource(spark_options(path=memory_uri, minPartitions="2"))

    left, partitions, reader = planned(ds, [EqualTo(("p",), 4)])
    assert left == []
    opened = [f for p in partitions for f in p.files]
    assert {f.partition_values["p"] for f in opened} == {"4"} and len(opened) == 1
    assert rows(reader, partitions) == list(range(40, 50))

    gt = GreaterThanOrEqual(("id",), 85)  # statistics rule out every file whose max id is below 85
    left, partitions, reader = planned(ds, [gt, Not(In(("s",), ["v1", None]))])
    assert [type(f).__name__ for f in left] == ["Not"]
    assert [f.path for p in partitions for f in p.files] == [f.path for f in every_file
                                                             if f.partition_values["p"] == "8"]
    assert rows(reader, partitions) == list(range(85, 90))  # the row filter applies inside the file


def test_read_tasks_get_disjoint_shares_of_the_files_and_a_pinned_version(memory_uri):
    three_partition_table(memory_uri)
    ds = DynacommitDataSource(spark_options(path=memory_uri, minPartitions="3"))
    _, partitions, reader = planned(ds, [])
    shares = [{f.path for f in p.files} for p in partitions]
    assert len(partitions) == 3 and all(shares)
    assert set.union(*shares) == {f.path for f in Table(memory_uri).add_actions()}
    assert sum(map(len, shares)) == len(set.union(*shares))
    write_table(memory_uri, pa.table({"id": pa.array([999], pa.int64()), "p": pa.array([0], pa.int32()), "s": ["x"]}))
    assert rows(reader, reader.partitions()) == list(range(90))  # the version the schema came from

    old = DynacommitDataSource(spark_options(path=memory_uri, versionAsOf="0"))
    _, partitions, reader = planned(old, [])
    assert rows(reader, partitions) == list(range(30))


def test_a_read_schema_must_be_a_subset_of_the_table(memory_uri):
    from pyspark.sql.types import IntegerType, StringType, StructField, StructType

    three_partition_table(memory_uri, commits=1)
    ds = DynacommitDataSource(spark_options(path=memory_uri))
    subset = StructType([StructField("s", StringType()), StructField("p", IntegerType())])
    reader = ds.reader(subset)
    batches = [b for p in reader.partitions() for b in reader.read(p)]
    assert {tuple(b.schema.names) for b in batches} == {("s", "p")}
    assert sum(b.num_rows for b in batches) == 30
    wrong = ds.reader(StructType([StructField("s", IntegerType()), StructField("nope", StringType())]))
    with pytest.raises(InvalidArgumentError, match="'s' is string in the table, int in the schema given.*'nope'"):
        wrong.partitions()


# --- the streaming source -----------------------------------------------------------------------------


def stream_reader(uri: str, **options: str):
    ds = DynacommitDataSource(spark_options(path=uri, **options))
    return ds.streamReader(ds.schema())


def batch_ids(reader, start: dict, end: dict) -> list[int]:
    executor_side = pickle.loads(pickle.dumps(reader))
    return rows(executor_side, reader.partitions(start, end))


def test_the_source_reads_the_snapshot_then_each_new_commit_once(memory_uri):
    three_partition_table(memory_uri, commits=2)
    reader = stream_reader(memory_uri)
    start = reader.initialOffset()
    assert start["isStartingVersion"] and start["reservoirVersion"] == 1 and start["index"] == -1
    end = reader.latestOffset(start, ReadAllAvailable())
    assert batch_ids(reader, start, end) == list(range(60))
    assert reader.latestOffset(end, ReadAllAvailable()) == end  # nothing new

    three_partition_table(memory_uri, commits=1)  # ids 0..29 again, as commit 2
    newer = reader.latestOffset(end, ReadAllAvailable())
    assert (newer["reservoirVersion"], newer["index"], newer["isStartingVersion"]) == (3, -1, False)
    assert batch_ids(reader, end, newer) == list(range(30))

    compacted = Table(memory_uri).optimize()  # version 3: the same rows in new files, dataChange=false
    assert compacted.result is not None and compacted.result.version == 3
    assert reader.latestOffset(newer, ReadAllAvailable()) == newer
    write_table(memory_uri, pa.table({"id": pa.array([500], pa.int64()), "p": pa.array([50], pa.int32()), "s": ["x"]}))
    last = reader.latestOffset(newer, ReadAllAvailable())
    assert batch_ids(reader, newer, last) == [500]


def test_max_files_per_trigger_splits_a_commit_and_starting_version_skips_the_snapshot(memory_uri):
    three_partition_table(memory_uri, commits=2)  # 3 files per commit
    reader = stream_reader(memory_uri, startingVersion="1", maxFilesPerTrigger="2")
    assert reader.getDefaultReadLimit() == ReadMaxFiles(2)
    offsets = [reader.initialOffset()]
    while True:
        nxt = reader.latestOffset(offsets[-1], ReadMaxFiles(2))
        if nxt == offsets[-1]:
            break
        offsets.append(nxt)
    assert [(o["reservoirVersion"], o["index"]) for o in offsets] == [(1, -1), (1, 1), (2, -1)]
    assert [batch_ids(reader, a, b) for a, b in zip(offsets, offsets[1:])] == [list(range(30, 50)), list(range(50, 60))]
    with pytest.raises(InvalidArgumentError, match="startingVersion 9 .* newest version 1"):
        stream_reader(memory_uri, startingVersion="9").initialOffset()


def test_without_admission_control_a_batch_takes_everything_after_the_offset_last_exchanged(memory_uri):
    """pyspark before 4.2 calls ``latestOffset()`` with no start and no limit (spark_integration.compat)."""
    three_partition_table(memory_uri, commits=2)  # 3 files per commit
    reader = stream_reader(memory_uri, maxFilesPerTrigger="2")
    start = reader.initialOffset()
    end = reader.latestOffset()
    assert batch_ids(reader, start, end) == list(range(60))  # nothing can bound the batch
    assert reader.latestOffset() == end  # nothing new

    three_partition_table(memory_uri, commits=1)  # version 2
    newer = reader.latestOffset()
    assert batch_ids(reader, end, newer) == list(range(30))
    write_table(memory_uri, pa.table({"id": pa.array([7], pa.int64()), "p": pa.array([0], pa.int32()), "s": ["z"]}),
                mode="overwrite")  # version 3 removes data
    with pytest.raises(ChangeCommitError, match=f"version 3 of {memory_uri} removes"):
        reader.latestOffset()

    restarted = stream_reader(memory_uri)  # from a checkpoint: no offset exchanged yet, the batch ends at the newest
    after_all = restarted.latestOffset()
    assert (after_all["reservoirVersion"], after_all["index"], after_all["isStartingVersion"]) == (4, -1, False)
    with pytest.raises(ChangeCommitError, match=f"version 3 of {memory_uri} removes"):
        restarted.partitions(newer, after_all)


def test_a_commit_that_removes_data_fails_the_stream_unless_skip_change_commits(memory_uri):
    three_partition_table(memory_uri, commits=1)
    strict, lenient = stream_reader(memory_uri), stream_reader(memory_uri, skipChangeCommits="true")
    starts = [r.latestOffset(r.initialOffset(), ReadAllAvailable()) for r in (strict, lenient)]
    three_partition_table(memory_uri, commits=1)  # version 1: an append, delivered first
    write_table(memory_uri, pa.table({"id": pa.array([7], pa.int64()), "p": pa.array([0], pa.int32()), "s": ["z"]}),
                mode="overwrite")  # version 2 removes data
    write_table(memory_uri, pa.table({"id": pa.array([8], pa.int64()), "p": pa.array([0], pa.int32()), "s": ["y"]}))

    before = strict.latestOffset(starts[0], ReadAllAvailable())
    assert before["reservoirVersion"] == 2 and batch_ids(strict, starts[0], before) == list(range(30))
    with pytest.raises(ChangeCommitError, match=f"version 2 of {memory_uri} removes 6 data file"):
        strict.latestOffset(before, ReadAllAvailable())

    end = lenient.latestOffset(starts[1], ReadAllAvailable())
    assert batch_ids(lenient, starts[1], end) == sorted([*range(30), 8])  # the overwrite's own row 7 is skipped too


def test_an_offset_of_another_table_is_refused(memory_uri):
    three_partition_table(memory_uri, commits=1)
    offset = stream_reader(memory_uri).initialOffset()
    other = memory_uri + "-other"
    three_partition_table(other, commits=1)
    with pytest.raises(InvalidArgumentError, match="new checkpoint location"):
        stream_reader(other).latestOffset(offset, ReadAllAvailable())


# --- the streaming sink's commit ----------------------------------------------------------------------


def staged_messages(writer, *, query_id: str, batch_id: int, rows_per_task: list[pa.Table]) -> list[StreamMessage]:
    """What the tasks of a micro-batch report: each stages its rows and returns its PendingSet."""
    messages = []
    for task_id, data in enumerate(rows_per_task):
        task = StageTask(table_path=writer.table_path, options=writer.options.storage, schema=writer.job.schema,
                         partition_by=writer.job.partition_by, job_id=writer.job_id(batch_id))
        [pending] = task.run(data.to_batches(), task_id=task_id, attempt_id=0)
        messages.append(StreamMessage(pendingset=pending.model_dump_json(), query_id=query_id, batch_id=batch_id))
    return messages


def test_a_replayed_micro_batch_commits_nothing_and_leaves_no_upload(memory_uri):
    from pyspark.sql.types import LongType, StructField, StructType

    schema = StructType([StructField("id", LongType())])
    ds = DynacommitDataSource(spark_options(path=memory_uri, checkpointLocation="/cp"))
    data = [pa.table({"id": pa.array([1, 2], pa.int64())}), pa.table({"id": pa.array([3], pa.int64())})]

    first = ds.streamWriter(schema, False)
    first.commit(staged_messages(first, query_id="q-1", batch_id=0, rows_per_task=data), 0)
    assert Table(memory_uri).version == 0

    replay = ds.streamWriter(schema, False)  # the restarted query plans batch 0 again
    replay.commit(staged_messages(replay, query_id="q-1", batch_id=0, rows_per_task=data), 0)
    other_query = ds.streamWriter(schema, False)
    other_query.commit(staged_messages(other_query, query_id="q-2", batch_id=0, rows_per_task=data[:1]), 0)

    table = Table(memory_uri)
    assert table.version == 1
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == [1, 1, 2, 2, 3]
    assert table.snapshot.state.app_version("q-1") == 0 and table.snapshot.state.app_version("q-2") == 0
    uri = TableUri.parse(memory_uri)
    assert open_object_store(uri).list_uploads(uri.key("")) == []


def test_commit_messages_of_mixed_batches_are_refused(memory_uri):
    from pyspark.sql.types import LongType, StructField, StructType

    ds = DynacommitDataSource(spark_options(path=memory_uri))
    writer = ds.streamWriter(StructType([StructField("id", LongType())]), False)
    messages = staged_messages(writer, query_id="q", batch_id=3, rows_per_task=[pa.table({"id": pa.array([1])})])
    with pytest.raises(Exception, match="batches \\[3\\]"):
        writer.commit(messages, 4)
    assert not Table.for_write(memory_uri).exists


def test_delta_options_of_a_batch_write_are_table_properties_spelled_as_delta_spells_them():
    options = spark_options(**{"path": "s3://b/t", "delta.enableChangeDataFeed": "true", "delta.appendOnly": "false"})
    assert parse_write(options).configuration == {"delta.enableChangeDataFeed": "true", "delta.appendOnly": "false"}
    assert parse_write(spark_options(path="s3://b/t")).configuration is None
    with pytest.raises(InvalidArgumentError, match="unknown option 'delta.appendonly' for a dynacommit batch read"):
        parse_read(spark_options(**{"path": "s3://b/t", "delta.appendOnly": "true"}))


def test_a_micro_batch_refused_at_commit_aborts_its_uploads_and_says_so(memory_uri):
    """The table became append-only while a Complete-mode micro-batch staged: its commit is refused, its
    uploads (never completed, so no object exists) are aborted, and the message says so."""
    from pyspark.sql.types import LongType, StructField, StructType

    from table.errors import AppendOnlyError

    write_table(memory_uri, pa.table({"id": pa.array([1], pa.int64())}))
    ds = DynacommitDataSource(spark_options(path=memory_uri, checkpointLocation="/cp"))
    writer = ds.streamWriter(StructType([StructField("id", LongType())]), True)  # outputMode("complete")
    messages = staged_messages(writer, query_id="q", batch_id=0, rows_per_task=[pa.table({"id": pa.array([2, 3])})])
    uri = TableUri.parse(memory_uri)
    objects = open_object_store(uri)
    before = {o.key for o in objects.list(uri.key(""))}
    assert objects.list_uploads(uri.key("")) != []
    Table(memory_uri).alter.set_table_properties({"delta.appendOnly": "true"})
    with pytest.raises(AppendOnlyError, match=r"1 staged upload\(s\), never completed, were aborted"):
        writer.commit(messages, 0)
    assert objects.list_uploads(uri.key("")) == []
    assert {o.key for o in objects.list(uri.key("")) if "/_delta_log/" not in o.key} == \
        {k for k in before if "/_delta_log/" not in k}
    assert Table(memory_uri).to_pyarrow_table().column("id").to_pylist() == [1]
