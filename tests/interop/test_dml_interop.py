"""Row-level changes and deltalake (delta-rs): it reads what our DELETE, UPDATE and MERGE commit (rows at every
version, and the change data feed), and its own DML mixed with ours gives what doing it all in deltalake
gives. Both go through moto S3; deltalake commits with ``AWS_S3_ALLOW_UNSAFE_RENAME`` (one writer at a
time here), we commit through DynamoDB.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from table import Table, write_table
from tests.support.dml_reference import ClauseSpec, MergeSpec, rows_of

deltalake = pytest.importorskip("deltalake")
pytestmark = pytest.mark.interop

CDF = {"delta.enableChangeDataFeed": "true"}


@pytest.fixture
def deltars_options(storage_options) -> dict[str, str]:
    options = {k: v for k, v in storage_options.items() if k != "DELTA_DYNAMO_TABLE_NAME"}
    options["AWS_S3_ALLOW_UNSAFE_RENAME"] = "true"
    return options


def people(ids, city="Paris", score=0.0) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "city": pa.array([city] * len(ids)),
                     "score": pa.array([score + i for i in ids], pa.float64()),
                     "note": pa.array([None if i % 3 == 0 else f"n{i}" for i in ids])})


def seed(uri, options, partitioned=True, configuration=None) -> None:
    write_table(uri, people([1, 2, 3, 4], "Paris"), partition_by=["city"] if partitioned else None,
                configuration=configuration, storage_options=options)
    write_table(uri, people([5, 6, 7], "Lyon", 10.0), storage_options=options)
    write_table(uri, people([8, 9], "Nice", 20.0), storage_options=options)


UPSERT = MergeSpec("target.id = source.id", (
    ClauseSpec("matched", "delete", "source.score < 0"),
    ClauseSpec("matched", "update", None, (("score", "source.score"), ("note", "'merged'"))),
    ClauseSpec("not_matched", "insert"),
    ClauseSpec("not_matched_by_source", "update", "target.city = 'Nice'", (("note", "'untouched'"),)),
))
SOURCE = pa.table({"id": pa.array([2, 6, 50, 51], pa.int64()), "city": ["Paris", "Lyon", "Paris", "Oslo"],
                   "score": [-1.0, 60.0, 500.0, 510.0], "note": ["a", "b", None, "d"]})

OPERATIONS = [
    ("delete", lambda t: t.delete("score > 11 AND note IS NOT NULL")),
    ("delete partition", lambda t: t.delete("city = 'Lyon'")),
    ("update", lambda t: t.update({"score": "score * 2", "note": "coalesce(note, 'was null')"}, predicate="id < 5")),
    ("merge", lambda t: UPSERT.apply(t.merge(SOURCE, UPSERT.predicate, source_alias="source",
                                             target_alias="target")).execute()),
]


@pytest.mark.parametrize("partitioned", [False, True], ids=["plain", "partitioned"])
def test_deltalake_reads_every_version_our_row_level_changes_commit(s3_uri, storage_options, deltars_options,
                                                                   partitioned):
    seed(s3_uri, storage_options, partitioned)
    for _, operation in OPERATIONS:
        operation(Table(s3_uri, storage_options=storage_options))
    ours = Table(s3_uri, storage_options=storage_options)
    assert ours.version == 2 + len(OPERATIONS)
    for version in range(ours.version + 1):
        expected = Table(s3_uri, version=version, storage_options=storage_options).to_pyarrow_table()
        theirs = deltalake.DeltaTable(s3_uri, version=version, storage_options=deltars_options).to_pyarrow_table()
        assert rows_of(theirs.select(expected.column_names).cast(expected.schema)) == rows_of(expected), version
    history = deltalake.DeltaTable(s3_uri, storage_options=deltars_options).history(4)
    assert [h["operation"] for h in history] == ["MERGE", "UPDATE", "DELETE", "DELETE"]


def test_deltalake_reads_the_change_data_our_operations_write(s3_uri, storage_options, deltars_options):
    seed(s3_uri, storage_options, partitioned=True, configuration=CDF)
    Table(s3_uri, storage_options=storage_options).update({"score": "-score"}, predicate="id = 1")
    Table(s3_uri, storage_options=storage_options).delete("id = 5")
    UPSERT.apply(Table(s3_uri, storage_options=storage_options).merge(SOURCE, UPSERT.predicate)).execute()
    feed = deltalake.DeltaTable(s3_uri, storage_options=deltars_options).load_cdf(starting_version=3)
    feed = pa.RecordBatchReader.from_stream(feed).read_all()
    got = sorted((r["_commit_version"], r["_change_type"], r["id"], r["score"]) for r in feed.to_pylist())
    assert got == sorted([
        (3, "update_preimage", 1, 1.0), (3, "update_postimage", 1, -1.0),
        (4, "delete", 5, 15.0),
        (5, "delete", 2, 2.0),
        (5, "update_preimage", 6, 16.0), (5, "update_postimage", 6, 60.0),
        (5, "insert", 50, 500.0), (5, "insert", 51, 510.0),
        (5, "update_preimage", 8, 28.0), (5, "update_postimage", 8, 28.0),
        (5, "update_preimage", 9, 29.0), (5, "update_postimage", 9, 29.0),
    ])


@pytest.mark.parametrize("theirs_first, ours_next", [(0, 3), (2, 0), (3, 2), (1, 3)],
                         ids=lambda i: OPERATIONS[i][0] if isinstance(i, int) else i)
def test_their_change_then_ours_gives_what_both_in_deltalake_give(s3_uri, storage_options, deltars_options,
                                                                 theirs_first, ours_next):
    mixed, reference = s3_uri + "-mixed", s3_uri + "-reference"
    for uri in (mixed, reference):
        seed(uri, storage_options, partitioned=True)
    first, second = OPERATIONS[theirs_first][1], OPERATIONS[ours_next][1]
    first(deltalake.DeltaTable(mixed, storage_options=deltars_options))
    second(Table(mixed, storage_options=storage_options))
    first(deltalake.DeltaTable(reference, storage_options=deltars_options))
    second(deltalake.DeltaTable(reference, storage_options=deltars_options))
    ours = Table(mixed, storage_options=storage_options).to_pyarrow_table()
    theirs = deltalake.DeltaTable(reference, storage_options=deltars_options).to_pyarrow_table()
    assert rows_of(ours) == rows_of(theirs.select(ours.column_names).cast(ours.schema))
    read_back = deltalake.DeltaTable(mixed, storage_options=deltars_options).to_pyarrow_table()
    assert rows_of(read_back.select(ours.column_names).cast(ours.schema)) == rows_of(ours)


def test_our_change_on_a_table_deltalake_created_with_the_change_data_feed(s3_uri, deltars_options, storage_options):
    deltalake.write_deltalake(s3_uri, people([1, 2, 3]), partition_by=["city"], configuration=CDF,
                              storage_options=deltars_options)
    Table(s3_uri, storage_options=storage_options).update({"note": "'ours'"}, predicate="id = 2")
    feed = deltalake.DeltaTable(s3_uri, storage_options=deltars_options).load_cdf(starting_version=1)
    feed = pa.RecordBatchReader.from_stream(feed).read_all()
    assert sorted((r["_change_type"], r["note"]) for r in feed.to_pylist()) == [
        ("update_postimage", "ours"), ("update_preimage", "n2")]


def _feed(reader) -> list[tuple]:
    rows = pa.RecordBatchReader.from_stream(reader).read_all()
    names = [n for n in ("id", "city", "score", "note", "_change_type", "_commit_version") if n in rows.column_names]
    return rows_of(rows.select(names))


@pytest.mark.parametrize("writer", ["ours", "deltalake"])
def test_our_change_feed_reader_reads_what_deltalakes_reads(s3_uri, storage_options, deltars_options, writer):
    seed(s3_uri, storage_options, partitioned=True, configuration=CDF)
    target = (Table(s3_uri, storage_options=storage_options) if writer == "ours"
              else deltalake.DeltaTable(s3_uri, storage_options=deltars_options))
    for _, operation in OPERATIONS:
        operation(target if writer == "ours" else deltalake.DeltaTable(s3_uri, storage_options=deltars_options))
    write_table(s3_uri, people([70, 71], "Oslo"), storage_options=storage_options)
    Table(s3_uri, storage_options=storage_options).optimize(target_size=5 * 1024 * 1024)
    ours = Table(s3_uri, storage_options=storage_options)
    theirs = deltalake.DeltaTable(s3_uri, storage_options=deltars_options)
    for start, end in ((0, None), (3, None), (4, 5), (ours.version, None)):
        got = _feed(ours.load_cdf(start, end))
        assert got == _feed(theirs.load_cdf(starting_version=start, ending_version=end)), (start, end)
    # _commit_timestamp: PROTOCOL.md's, the log file's modification time (deltalake 1.6 takes the commitInfo's
    # timestamp instead, so here the log's listing is the expectation)
    listed: dict[int, int] = {}
    for f in ours.log_store.list_files():
        if f.name.endswith(".json"):  # made increasing, as Delta's history manager does
            listed[int(f.name[:20])] = max(f.last_modified_ms, max(listed.values(), default=-1) + 1)
    mine = ours.load_cdf(0).read_all()
    for version, stamp in zip(mine["_commit_version"].to_pylist(), mine["_commit_timestamp"].to_pylist()):
        assert int(stamp.timestamp() * 1000) == listed[version]


@pytest.mark.parametrize("partitioned", [False, True], ids=["plain", "partitioned"])
def test_deltalake_reads_every_version_our_deletion_vectors_make(s3_uri, storage_options, deltars_options,
                                                                partitioned):
    seed(s3_uri, storage_options, partitioned, configuration={"delta.enableDeletionVectors": "true",
                                                             **CDF})
    for _, operation in OPERATIONS:
        operation(Table(s3_uri, storage_options=storage_options))
    Table(s3_uri, storage_options=storage_options).delete("id = 4")  # a second vector on a file that has one
    ours = Table(s3_uri, storage_options=storage_options)
    assert any(a.deletion_vector is not None for a in ours.add_actions())
    import polars

    for version in range(ours.version + 1):
        expected = Table(s3_uri, version=version, storage_options=storage_options).to_pyarrow_table()
        # deltalake's pyarrow reader refuses deletion vectors; its SQL engine (delta-kernel underneath) reads them
        dt = deltalake.DeltaTable(s3_uri, version=version, storage_options=deltars_options)
        theirs = pa.RecordBatchReader.from_stream(
            deltalake.QueryBuilder().register("t", dt).execute("SELECT * FROM t")).read_all()
        assert rows_of(theirs.select(expected.column_names).cast(expected.schema)) == rows_of(expected), version
        read_by_polars = polars.read_delta(s3_uri, version=version, storage_options=deltars_options).to_arrow()
        assert rows_of(read_by_polars.select(expected.column_names).cast(expected.schema)) == rows_of(expected)
    # deltalake 1.6's change feed reader reads a removed file without its deletion vector (it reports rows
    # deleted earlier as deleted again), so here the expectation is the difference of consecutive versions
    from collections import Counter

    feed = ours.load_cdf(0).read_all().to_pylist()
    names = ["id", "city", "score", "note"]
    for version in range(1, ours.version + 1):
        before = Counter(rows_of(Table(s3_uri, version=version - 1, storage_options=storage_options)
                                 .to_pyarrow_table().select(names)))
        after = Counter(rows_of(Table(s3_uri, version=version, storage_options=storage_options)
                                .to_pyarrow_table().select(names)))
        gone = Counter(tuple(r[n] for n in names) for r in feed if r["_commit_version"] == version
                       and r["_change_type"] in ("delete", "update_preimage"))
        came = Counter(tuple(r[n] for n in names) for r in feed if r["_commit_version"] == version
                       and r["_change_type"] in ("insert", "update_postimage"))
        assert (gone, came) == (before - after, after - before), version
