"""write_table, reading back and maintenance, on the in-memory store and on moto (S3 + DynamoDB)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import multiprocessing
import uuid
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pytest

from logstore import TableUri
from table.data.files import filesystem_for
from table.data.jobcommit import commit_staged
from table.data.read import prune_files, to_pyarrow_dataset, to_pyarrow_table
from table.data.staging import StagingWriter
from table.data.write import write_table
from table.data.writespec import CommitResult, StreamingUpdate, WriteSpec
from table.errors import SchemaMismatchError, TableExistsError, UnsupportedTypeError
from table.maintenance import abort_pending_uploads, list_pending_uploads, vacuum
from table.table import Table
from tests.support.filesystems import OpeningRecorder


@pytest.fixture(params=["memory", "s3"])
def target(request) -> tuple[str, dict[str, str] | None]:
    """``(uri, storage_options)`` of a fresh table on each backend."""
    if request.param == "memory":
        return request.getfixturevalue("memory_uri"), None
    return request.getfixturevalue("s3_uri"), request.getfixturevalue("storage_options")


def people(start: int, count: int, city: str = "Paris") -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table({"id": pa.array(ids, pa.int64()), "city": pa.array([city] * count),
                     "score": pa.array([i * 0.5 for i in ids], pa.float64())})


def read(uri: str, options, **kwargs) -> pa.Table:
    return Table(uri, storage_options=options).to_pyarrow_table(**kwargs).sort_by("id")


def keys_under(table: Table) -> set[str]:
    return {o.key for o in table.objects.list(table.uri.key(""))}


def data_keys(table: Table) -> set[str]:
    """Keys under the table outside ``_delta_log/``."""
    return {k for k in keys_under(table) if not table.uri.relative(k).startswith("_delta_log/")}


# --- modes ----------------------------------------------------------------------------------------


def test_append_twice_then_read_every_row(target):
    uri, options = target
    first = write_table(uri, people(0, 5), storage_options=options)
    second = write_table(uri, people(5, 5), storage_options=options)
    assert isinstance(first, CommitResult)
    assert (first.version, second.version) == (0, 1)
    assert read(uri, options).equals(people(0, 10))
    assert second.metrics["numOutputRows"] == "5" and second.metrics["numFiles"] == "1"
    history = Table(uri, storage_options=options).history()
    assert history[0].operation == "WRITE" and history[0].operation_parameters["mode"] == "Append"
    assert history[0].operation_metrics["jobId"] == second.metrics["jobId"]
    assert history[0].engine_info.startswith("dynacommit ")


def test_user_metadata_is_recorded_in_the_commit_and_shown_by_history(target):
    uri, options = target
    write_table(uri, people(0, 2), storage_options=options)
    write_table(uri, people(2, 2), storage_options=options, user_metadata="backfill of 2026-11-22")
    table = Table(uri, storage_options=options)
    assert [h.user_metadata for h in table.history()] == ["backfill of 2026-11-22", None]
    assert table.history(limit=1)[0].to_dict()["userMetadata"] == "backfill of 2026-11-22"


def test_a_micro_batch_commits_as_a_streaming_update_with_its_query_and_epoch(target):
    """What the Spark sink commits per micro-batch (:class:`StreamingUpdate`), through the same job commit."""
    uri, options = target
    table = Table.for_write(uri, storage_options=options)
    for epoch, mode in enumerate(["append", "overwrite"]):
        spec = WriteSpec.of(mode=mode, app_id="query-1", app_version=epoch)
        spec = dataclasses.replace(spec, streaming=StreamingUpdate("query-1", epoch, "Append" if mode == "append"
                                                                   else "Complete"))
        plan = spec.plan(table, people(0, 1).schema)
        writer = StagingWriter(table.objects, table.uri, schema=plan.schema, partition_by=plan.partition_by,
                               job_id=f"stream-b{epoch}", task_id=0)
        with writer:
            writer.write(people(epoch * 10, 3))
            pending = writer.finish()
        commit_staged(table, [pending], spec, plan, job_id=f"stream-b{epoch}", engine_info="test")
    history = sorted(Table(uri, storage_options=options).history(), key=lambda h: h.version)
    assert [(h.operation, h.operation_parameters, h.app_txns) for h in history] == [
        ("STREAMING UPDATE", {"outputMode": "Append", "queryId": "query-1", "epochId": "0"}, {"query-1": 0}),
        ("STREAMING UPDATE", {"outputMode": "Complete", "queryId": "query-1", "epochId": "1"}, {"query-1": 1}),
    ]
    assert read(uri, options).equals(people(10, 3))


def test_overwrite_replaces_every_file_in_one_commit(target):
    uri, options = target
    write_table(uri, people(0, 5), storage_options=options)
    write_table(uri, people(5, 5), storage_options=options)
    result = write_table(uri, people(100, 2), mode="overwrite", storage_options=options)
    assert result.version == 2 and result.metrics["numRemovedFiles"] == "2"
    assert read(uri, options).equals(people(100, 2))
    assert Table(uri, version=1, storage_options=options).to_pyarrow_table().num_rows == 10


def test_dynamic_partition_overwrite_replaces_only_partitions_in_the_data(target):
    uri, options = target
    write_table(uri, pa.concat_tables([people(0, 3, "Paris"), people(3, 3, "Oslo")]), partition_by=["city"],
                storage_options=options)
    write_table(uri, people(6, 2, "Lima"), storage_options=options)
    write_table(uri, people(50, 1, "Oslo"), mode="overwrite", partition_overwrite="dynamic", storage_options=options)
    got = read(uri, options)
    assert sorted(zip(got["city"].to_pylist(), got["id"].to_pylist())) == sorted(
        [("Paris", 0), ("Paris", 1), ("Paris", 2), ("Lima", 6), ("Lima", 7), ("Oslo", 50)])
    write_table(uri, people(60, 1, "Rome"), mode="overwrite", storage_options=options)
    assert read(uri, options)["city"].to_pylist() == ["Rome"]


def test_error_mode_refuses_an_existing_table_and_ignore_mode_does_nothing(target):
    uri, options = target
    assert write_table(uri, people(0, 2), mode="error", storage_options=options).version == 0
    with pytest.raises(TableExistsError, match="already exists"):
        write_table(uri, people(2, 2), mode="error", storage_options=options)
    ignored = write_table(uri, people(2, 2), mode="ignore", storage_options=options)
    assert ignored.version == 0 and ignored.metrics["skipped"] == "true"
    assert read(uri, options).equals(people(0, 2))
    table = Table(uri, storage_options=options)
    assert len(data_keys(table)) == 1  # nothing staged by the refused writes
    assert table.objects.list_uploads(table.uri.key("")) == []


def test_partition_by_on_an_existing_table_must_match(target):
    uri, options = target
    write_table(uri, people(0, 2), partition_by=["city"], storage_options=options)
    with pytest.raises(ValueError, match=r"partitioned by \['city'\]"):
        write_table(uri, people(2, 2), partition_by=["id"], storage_options=options)
    write_table(uri, people(2, 2), partition_by=["city"], storage_options=options)
    assert read(uri, options).num_rows == 4


def test_a_long_lived_table_object_is_left_at_each_new_version(target):
    uri, options = target
    table = Table.for_write(uri, storage_options=options)
    assert not table.exists and table.version == -1
    for i in range(3):
        result = write_table(table, people(i * 10, 10))
        assert table.version == result.version == i
    assert table.to_pyarrow_table().num_rows == 30


def test_two_writers_creating_the_same_table_by_appending_both_land(target):
    uri, options = target
    first = Table.for_write(uri, storage_options=options)
    second = Table.for_write(uri, storage_options=options)
    assert write_table(first, people(0, 3)).version == 0
    result = write_table(second, people(3, 3))
    assert result.version == 1 and second.version == 1
    assert read(uri, options).equals(people(0, 6))


def test_record_batch_reader_is_streamed(target):
    uri, options = target
    produced = []

    def batches():
        for i in range(20):
            produced.append(i)
            yield people(i * 100, 100).to_batches()[0]

    reader = pa.RecordBatchReader.from_batches(people(0, 1).schema, batches())
    result = write_table(uri, reader, storage_options=options)
    assert produced == list(range(20))
    assert result.metrics["numOutputRows"] == "2000"
    assert read(uri, options).equals(people(0, 2000))


def test_app_id_makes_a_retried_write_a_no_op_that_leaves_no_files(target):
    uri, options = target
    first = write_table(uri, people(0, 3), app_id="job-a", app_version=1, storage_options=options)
    table = Table(uri, storage_options=options)
    before = keys_under(table)
    again = write_table(uri, people(0, 3), app_id="job-a", app_version=1, storage_options=options)
    assert again.version == first.version
    assert read(uri, options).equals(people(0, 3))
    assert keys_under(table) == before
    assert table.objects.list_uploads(table.uri.key("")) == []


def test_a_replayed_job_is_skipped_before_staging_anything(target, monkeypatch):
    import table.data.write as write_module

    uri, options = target
    first = write_table(uri, people(0, 3), app_id="job-b", app_version=7, storage_options=options)

    class NoStaging:
        def __init__(self, *args, **kwargs):
            raise AssertionError("a replayed job must not stage uploads")

    monkeypatch.setattr(write_module, "StagingWriter", NoStaging)
    again = write_table(uri, people(0, 3), app_id="job-b", app_version=7, storage_options=options)
    assert (again.version, again.metrics["skipped"]) == (first.version, "true")
    older = write_table(uri, people(0, 3), app_id="job-b", app_version=6, storage_options=options)
    assert older.version == first.version
    with pytest.raises(ValueError, match="together"):
        write_table(uri, people(0, 3), app_id="job-b", storage_options=options)


# --- types and partitions -------------------------------------------------------------------------


def typed_rows() -> pa.Table:
    return pa.table({
        "n": pa.array([1, 2, 3, 4, 5, 6], pa.int32()),
        "s": ["plain", "with space", "a/b", "ünï ☃", "k=v%", None],
        "d": pa.array([dt.date(2024, 1, 1), dt.date(2024, 1, 1), None, dt.date(1999, 12, 31),
                       dt.date(2024, 1, 1), dt.date(2024, 1, 2)], pa.date32()),
        "ts": pa.array([dt.datetime(2024, 1, 1, 12, 30, 0, 123456)] * 6, pa.timestamp("us", tz="UTC")),
        "amount": pa.array([Decimal("1.10"), None, Decimal("-2.50"), Decimal("0.00"), Decimal("9.99"),
                            Decimal("3.33")], pa.decimal128(6, 2)),
        "tags": pa.array([["x"], [], None, ["y", "z"], ["w"], ["v"]], pa.list_(pa.string())),
        "point": pa.array([{"x": 1.0, "y": 2.0}] * 5 + [None], pa.struct([("x", pa.float64()), ("y", pa.float64())])),
    })


@pytest.mark.parametrize("partition_by", [[], ["s"], ["d", "n"], ["s", "d"]])
def test_partitioned_round_trip_keeps_types_and_values(target, partition_by):
    uri, options = target
    data = typed_rows()
    write_table(uri, data, partition_by=partition_by, storage_options=options)
    table = Table(uri, storage_options=options)
    assert table.schema == data.schema
    assert table.partition_columns == partition_by
    got = table.to_pyarrow_table().sort_by("n")
    assert got.equals(data)
    dataset = to_pyarrow_dataset(table)
    assert dataset.schema == data.schema
    assert dataset.count_rows() == 6


def test_partition_values_with_special_characters_filter_exactly(target):
    uri, options = target
    write_table(uri, typed_rows(), partition_by=["s"], storage_options=options)
    table = Table(uri, storage_options=options)
    for value in ["with space", "a/b", "ünï ☃", "k=v%"]:
        got = table.to_pyarrow_table(filter=pc.field("s") == value)
        assert got["s"].to_pylist() == [value]
    assert table.to_pyarrow_table(filter=pc.field("s").is_null())["n"].to_pylist() == [6]


def test_empty_table_reads_as_empty_with_its_schema(target):
    uri, options = target
    data = typed_rows().slice(0, 0)
    write_table(uri, data, partition_by=["s"], storage_options=options)
    table = Table(uri, storage_options=options)
    assert table.to_pyarrow_table().equals(data)
    assert table.to_pyarrow_table(columns=["n"], filter=pc.field("n") > 1).num_rows == 0


# --- pruning ------------------------------------------------------------------------------------


def test_reads_open_only_files_that_may_match_the_filter(target):
    uri, options = target
    for city, start in (("Paris", 0), ("Oslo", 100), ("Lima", 200)):
        write_table(uri, people(start, 50, city), partition_by=["city"], storage_options=options)
    for start in (300, 400):
        write_table(uri, people(start, 50, "Oslo"), storage_options=options)
    table = Table(uri, storage_options=options)
    counting = OpeningRecorder(filesystem_for(table.uri, table.storage_options))
    fs = pafs.PyFileSystem(counting)

    got = to_pyarrow_table(table, filter=pc.field("city") == "Oslo", filesystem=fs)
    assert sorted(got["id"].to_pylist()) == list(range(100, 150)) + list(range(300, 350)) + list(range(400, 450))
    assert len(counting.opened) == 3

    counting.clear()
    got = to_pyarrow_table(table, filter=(pc.field("id") >= 410) & (pc.field("id") < 420), filesystem=fs)
    assert got["id"].to_pylist() == list(range(410, 420))
    assert len(counting.opened) == 1 and "Oslo" in counting.opened[0]

    counting.clear()
    got = to_pyarrow_table(table, columns=["id"], filter=pc.field("id") > 1000, filesystem=fs)
    assert got.num_rows == 0 and got.column_names == ["id"]
    assert counting.opened == []

    # Floating-point stats prune nothing: a file may hold NaN, which no range bounds.
    counting.clear()
    assert to_pyarrow_table(table, filter=pc.field("score") > 1000.0, filesystem=fs).num_rows == 0
    assert len(counting.opened) == 5

    # The dataset carries the same guarantees: a filter given to it skips the same files.
    counting.clear()
    dataset = to_pyarrow_dataset(table, filesystem=fs)
    assert dataset.to_table(filter=pc.field("id") < 10)["id"].to_pylist() == list(range(10))
    assert len(counting.opened) == 1 and "Paris" in counting.opened[0]
    assert [f.partition_values for f in prune_files(table.snapshot, pc.field("id") < 10)] == [{"city": "Paris"}]


def test_filters_on_columns_with_nulls_and_timestamps_at_millisecond_boundaries_read_exactly(target):
    uri, options = target
    base = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    batches = [
        {"x": [1, 2, None], "t": [base + dt.timedelta(microseconds=m) for m in (0, 999, 1500)]},
        {"x": [None, None], "t": [base + dt.timedelta(microseconds=m) for m in (1999, 2000)]},
        {"x": [10, 20], "t": [None, base + dt.timedelta(microseconds=2001)]},
    ]
    schema = pa.schema([("x", pa.int64()), ("t", pa.timestamp("us", tz="UTC"))])
    for batch in batches:
        write_table(uri, pa.table(batch, schema=schema), storage_options=options)
    table = Table(uri, storage_options=options)
    everything = table.to_pyarrow_table()
    x, t = pc.field("x"), pc.field("t")

    def at(micros: int) -> pa.Scalar:
        return pa.scalar(base + dt.timedelta(microseconds=micros), pa.timestamp("us", tz="UTC"))

    filters = [x.is_null(), x.is_valid(), x > 5, x < 2, x.isin([2, None]), ~(x < 10), t.is_null(), t == at(1500),
               t > at(1500), t >= at(2000), t < at(999), t <= at(999), (t > at(1000)) & (t < at(2000)),
               (x == 2) | (t == at(2001))]
    for filter in filters:
        got = table.to_pyarrow_table(filter=filter)
        assert got.sort_by("t").equals(everything.filter(filter).sort_by("t")), str(filter)
    # The first file's nulls in x leave it no range; the second's x is known null.
    assert len(prune_files(table.snapshot, x > 5)) == 2
    assert len(prune_files(table.snapshot, x.is_null())) == 2
    # Timestamp bounds are widened to the millisecond: no file is skipped near its bounds, the third
    # (a null in t) never is.
    assert len(prune_files(table.snapshot, t > at(2000))) == 3
    assert len(prune_files(table.snapshot, t > at(3000))) == 1
    assert len(prune_files(table.snapshot, t < at(-1000))) == 1


# --- errors leave committed data untouched --------------------------------------------------------


def test_schema_mismatch_missing_partition_column_and_unsupported_type_leave_the_table_as_it_was(target):
    uri, options = target
    write_table(uri, people(0, 4), partition_by=["city"], storage_options=options)
    table = Table(uri, storage_options=options)
    before = keys_under(table)
    with pytest.raises(SchemaMismatchError, match="'score'"):
        write_table(uri, people(4, 2).drop_columns(["score"]).append_column("score", pa.array(["x", "y"])),
                    storage_options=options)
    with pytest.raises(SchemaMismatchError, match="missing column 'city'"):
        write_table(uri, people(4, 2).drop_columns(["city"]), storage_options=options)
    with pytest.raises(UnsupportedTypeError, match="'when'"):
        write_table(uri, people(4, 2).append_column("when", pa.array([1, 2], pa.duration("s"))),
                    storage_options=options)
    with pytest.raises(SchemaMismatchError, match="partition column 'nope' is missing"):
        write_table(uri + "-new", people(0, 1), partition_by=["nope"], storage_options=options)
    assert keys_under(table) == before
    assert table.objects.list_uploads(table.uri.key("")) == []
    assert read(uri, options).equals(people(0, 4).select(table.schema.names).sort_by("id"))
    assert table.refresh().version == 0


# --- maintenance ----------------------------------------------------------------------------------


def test_vacuum_deletes_only_unreferenced_files_past_the_retention(target):
    uri, options = target
    write_table(uri, people(0, 3), storage_options=options)
    write_table(uri, people(3, 3), mode="overwrite", storage_options=options)
    table = Table(uri, storage_options=options)
    stray = table.uri.key("part-00000-stray-c000.snappy.parquet")
    table.objects.put(stray, b"not referenced")
    with pytest.raises(ValueError, match="force=True"):
        vacuum(table, retention_hours=1)
    kept = vacuum(table, dry_run=False)
    assert kept.count == 0 and kept.kept_unreferenced == 2
    dry = vacuum(table, retention_hours=0, force=True)
    assert dry.dry_run and dry.count == 2 and "would delete 2 file(s)" in str(dry)
    table.log_store.wait_finished()  # the writes' temp-file DELETEs go out after they returned
    log_keys = keys_under(table) - data_keys(table)
    assert len(data_keys(table)) == 3
    done = vacuum(table, retention_hours=0, force=True, dry_run=False)
    assert sorted(done.files) == sorted(dry.files)
    assert {table.uri.relative(k) for k in data_keys(table)} == {f.path for f in table.snapshot.files}
    assert keys_under(table) - data_keys(table) == log_keys
    assert read(uri, options).equals(people(3, 3))


def test_pending_uploads_are_listed_and_aborted_past_their_age(target):
    uri, options = target
    write_table(uri, people(0, 1), storage_options=options)
    table = Table(uri, storage_options=options)
    writer = StagingWriter(table.objects, table.uri, schema=table.schema, partition_by=[], job_id="dead-job",
                           task_id=3)
    writer.write(people(0, 10))
    writer.finish()  # a task whose job never committed
    assert len(list_pending_uploads(table)) == 1
    if options is None:  # moto reports every upload as initiated in 2010: ages are checked in memory only
        assert list_pending_uploads(table, older_than_hours=1) == []
        young = abort_pending_uploads(table, dry_run=False)
        assert young.count == 0 and young.remaining == 1
    dry = abort_pending_uploads(table, older_than_hours=0)
    assert dry.count == 1 and "would abort 1" in str(dry)
    assert len(list_pending_uploads(table)) == 1
    done = abort_pending_uploads(table, older_than_hours=0, dry_run=False)
    assert done.count == 1 and list_pending_uploads(table) == []


# --- many processes ------------------------------------------------------------------------------


def _append_worker(uri: str, options: dict[str, str], worker: int, commits: int, rows: int) -> list[int]:
    versions = []
    for c in range(commits):
        start = (worker * commits + c) * rows
        versions.append(write_table(uri, people(start, rows, f"w{worker}"), partition_by=["city"],
                                    storage_options=options).version)
    return versions


@pytest.mark.slow
def test_four_processes_appending_at_once_write_every_row_exactly_once(s3_uri, storage_options):
    workers, commits, rows = 4, 5, 20
    context = multiprocessing.get_context("spawn")
    with context.Pool(workers) as pool:
        results = pool.starmap(_append_worker, [(s3_uri, storage_options, w, commits, rows) for w in range(workers)])
    # Contended blind appends may commit together (group commit): one version can hold several appends, so
    # the versions given back are contiguous from 0, at most one per append, and each worker's increase.
    versions = sorted({v for r in results for v in r})
    assert versions == list(range(versions[-1] + 1)) and len(versions) <= workers * commits
    assert all(r == sorted(set(r)) for r in results)
    got = read(s3_uri, storage_options)
    assert got["id"].to_pylist() == list(range(workers * commits * rows))
    table = Table(s3_uri, storage_options=storage_options)
    assert table.version == versions[-1]
    assert table.objects.list_uploads(table.uri.key("")) == []
    assert len(table.snapshot.files) == workers * commits


def test_table_uri_keys_of_a_written_table_are_under_the_table(target):
    uri, options = target
    write_table(uri, people(0, 1), partition_by=["city"], storage_options=options)
    table = Table(uri, storage_options=options)
    parsed = TableUri.parse(uri)
    assert all(k.startswith(parsed.key("")) for k in keys_under(table))
    assert table.files()[0].startswith(uri + "/city=Paris/part-00000-")
    assert str(uuid.UUID(table.history()[0].operation_metrics["jobId"])) in table.files()[0]


def test_configuration_is_set_on_creation_and_cannot_change_later(target):
    uri, options = target
    write_table(uri, people(0, 1), configuration={"delta.appendOnly": "true"}, storage_options=options)
    assert Table(uri, storage_options=options).snapshot.configuration == {"delta.appendOnly": "true"}
    write_table(uri, people(1, 1), configuration={"delta.appendOnly": "true"}, storage_options=options)
    with pytest.raises(ValueError, match="set when the table is created"):
        write_table(uri, people(2, 1), configuration={"delta.appendOnly": "false"}, storage_options=options)
    assert read(uri, options).equals(people(0, 2))


def test_memory_filesystem_lists_reads_and_writes_like_a_bucket(memory_uri):
    from logstore import open_object_store

    uri = TableUri.parse(memory_uri)
    objects = open_object_store(uri)
    for relative in ("a=1/f1", "a=1/f2", "a=2/x/f3", "top"):
        objects.put(uri.key(relative), relative.encode())
    fs = filesystem_for(uri)
    root = f"{uri.bucket}/{uri.prefix}"
    listed = {(i.path[len(root) + 1:], i.type) for i in fs.get_file_info(pafs.FileSelector(root))}
    assert listed == {("a=1", pafs.FileType.Directory), ("a=2", pafs.FileType.Directory), ("top", pafs.FileType.File)}
    deep = {i.path[len(root) + 1:] for i in fs.get_file_info(pafs.FileSelector(root, recursive=True))
            if i.type == pafs.FileType.File}
    assert deep == {"a=1/f1", "a=1/f2", "a=2/x/f3", "top"}
    assert fs.open_input_file(f"{root}/a=2/x/f3").read() == b"a=2/x/f3"
    with fs.open_output_stream(f"{root}/new") as out:
        out.write(b"hello")
    assert objects.get(uri.key("new")) == b"hello"
    fs.delete_dir(f"{root}/a=1")
    assert fs.get_file_info(f"{root}/a=1/f1").type == pafs.FileType.NotFound


def test_columns_known_null_from_stats_keep_their_types_when_read_with_a_filter(target):
    uri, options = target
    schema = pa.schema([("id", pa.int64()), ("s", pa.string()), ("t", pa.timestamp("us", tz="UTC")),
                        ("d", pa.decimal128(6, 2)), ("day", pa.date32())])
    write_table(uri, pa.table({"id": [1, 2], "s": [None, None], "t": [None, None], "d": [None, None],
                               "day": [None, None]}, schema=schema), storage_options=options)
    write_table(uri, pa.table({"id": [3], "s": ["x"], "t": [dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)],
                               "d": [Decimal("1.50")], "day": [dt.date(2024, 1, 1)]}, schema=schema),
                storage_options=options)
    table = Table(uri, storage_options=options)
    got = table.to_pyarrow_table(filter=pc.field("id") >= 1).sort_by("id")
    assert got.schema == schema and got.equals(table.to_pyarrow_table().sort_by("id"))
    assert table.to_pyarrow_table(filter=pc.field("s").is_null())["id"].to_pylist() == [1, 2]
    assert len(prune_files(table.snapshot, pc.field("d") > Decimal("1.00"))) == 1


def test_reading_a_snapshot_whose_file_was_deleted_names_the_table_and_version(s3_uri, storage_options):
    import pyarrow as pa

    from table import Table, write_table
    from table.errors import DataFileMissingError

    write_table(s3_uri, pa.table({"x": [1, 2, 3]}), storage_options=storage_options)
    table = Table(s3_uri, storage_options=storage_options)
    (add,) = table.add_actions()
    table.objects.delete([table.uri.key(add.path)])
    with pytest.raises(DataFileMissingError, match=f"{s3_uri} at version 0") as info:
        table.to_pyarrow_table()
    assert isinstance(info.value, FileNotFoundError)


def test_a_small_write_puts_each_file_once_at_commit_and_starts_no_multipart_upload(target, monkeypatch):
    """An in-process job's file smaller than one part is held in memory and PUT at job commit: one request
    instead of CreateMultipartUpload + UploadPart + CompleteMultipartUpload, and nothing to abort."""
    uri, options = target
    table = Table.for_write(uri, storage_options=options)
    calls: list[str] = []
    for name in ("create_upload", "upload_part", "complete_upload", "put"):
        real = getattr(table.objects, name)

        def counted(key, *args, _name=name, _real=real, **kwargs):
            if "/_delta_log/" not in "/" + table.uri.relative(key):  # in memory the log shares the bucket
                calls.append(_name)
            return _real(key, *args, **kwargs)

        monkeypatch.setattr(table.objects, name, counted)
    write_table(table, people(0, 4), partition_by=["city"])
    assert calls == ["put"] * len(set(people(0, 4)["city"].to_pylist()))
    assert read(uri, options).num_rows == 4
