"""Small data files are fetched whole on the process's fetch pool and decoded from memory
(``table.data.fetching``): the result must be exactly the one pyarrow's own dataset read gives."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pytest

from logstore import open_log_store
from table.data import fetching
from table.data import read as reader
from table.data.files import fetch_whole, filesystem_for
from table.data.fragments import file_path
from table.data.write import write_table
from table.errors import CorruptDataError, DataFileMissingError
from table.log.actions import serialize_commit
from table.log.schema import schema_string
from table.table import Table
from tests.support.filesystems import OpeningRecorder


@pytest.fixture(params=["memory", "s3"])
def target(request) -> tuple[str, dict[str, str] | None]:
    if request.param == "memory":
        return request.getfixturevalue("memory_uri"), None
    return request.getfixturevalue("s3_uri"), request.getfixturevalue("storage_options")


def people(start: int, count: int, city: str) -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table({"id": pa.array(ids, pa.int64()), "city": pa.array([city] * count),
                     "score": pa.array([i * 0.5 for i in ids], pa.float64())})


def evolved_table(uri: str, options) -> Table:
    """Seven files in three partitions, then a column added to the schema and two more files with it:
    the first seven lack the column."""
    for i, city in enumerate(["Paris", "Oslo", "Lima", "Oslo", "Paris", "Lima", "Oslo"]):
        write_table(uri, people(i * 10, 10, city), partition_by=["city"], storage_options=options)
    table = Table(uri, storage_options=options)
    wider = people(0, 1, "x").schema.append(pa.field("note", pa.string()))
    metadata = table.snapshot.metadata.model_copy(update={"schema_string": schema_string(wider)})
    open_log_store(uri, storage_options=options).write(table.version + 1, serialize_commit([metadata]))
    table = Table(uri, storage_options=options)
    for i, city in ((7, "Lima"), (8, "Oslo")):
        data = people(i * 10, 10, city).append_column("note", pa.array([f"n{i}"] * 10))
        write_table(table, data)
    return Table(uri, storage_options=options)


def both_ways(table: Table, monkeypatch, **kwargs) -> tuple[pa.Table, pa.Table, OpeningRecorder]:
    """``(whole-file read, pyarrow's own read, the filesystem the whole-file read opened through)``."""
    opening = OpeningRecorder(filesystem_for(table.uri, table.storage_options))
    whole = reader.to_pyarrow_table(table, filesystem=pafs.PyFileSystem(opening), **kwargs)
    own = reader.to_pyarrow_dataset(table).to_table(**kwargs)  # pyarrow's own scan of the same files
    return whole, own, opening


@pytest.mark.parametrize("kwargs", [
    {},
    {"columns": ["note", "city", "id"]},
    {"filter": pc.field("city") == "Oslo"},
    {"filter": (pc.field("id") >= 15) & (pc.field("id") < 75), "columns": ["id", "note"]},
    {"filter": pc.field("note").is_null() & (pc.field("city") != "Paris")},
    {"filter": pc.field("id") > 1000},
], ids=["all", "columns", "partition-filter", "stats-filter-and-columns", "null-filter", "nothing-matches"])
def test_whole_file_read_gives_what_the_dataset_read_gives(target, monkeypatch, kwargs):
    uri, options = target
    table = evolved_table(uri, options)
    monkeypatch.setattr(fetching, "WINDOW", 2)  # several windows, one of them partial
    whole, own, opening = both_ways(table, monkeypatch, **kwargs)
    assert whole.schema == own.schema and whole.equals(own)
    kept = reader.prune_files(table.snapshot, kwargs["filter"]) if "filter" in kwargs else table.add_actions()
    assert len(opening.opened_by("dynacommit-fetch")) == len(opening.opened) == len(kept)


def test_schema_evolution_and_partitions_read_back_typed_and_null_filled(target, monkeypatch):
    uri, options = target
    table = evolved_table(uri, options)
    got = table.to_pyarrow_table().sort_by("id")
    assert got.column_names == ["id", "city", "score", "note"]
    assert got["id"].to_pylist() == list(range(90))
    assert got["note"].to_pylist() == [None] * 70 + ["n7"] * 10 + ["n8"] * 10
    assert got["city"].to_pylist()[70:] == ["Lima"] * 10 + ["Oslo"] * 10


def test_bigger_files_are_left_to_pyarrow_and_the_result_is_the_same(target, monkeypatch):
    uri, options = target
    table = evolved_table(uri, options)
    sizes = sorted(add.size for add in table.add_actions())
    monkeypatch.setattr(fetching, "WHOLE_FILE", sizes[4])  # some small, some not
    monkeypatch.setattr(fetching, "WINDOW", 3)
    whole, own, opening = both_ways(table, monkeypatch, filter=pc.field("score") >= 0.0)
    assert whole.equals(own)
    small = [a for a in table.add_actions() if a.size <= sizes[4]]
    assert 0 < len(opening.opened_by("dynacommit-fetch")) == len(small) < len(opening.opened) == len(table.add_actions())


def test_a_missing_small_file_is_named_and_a_corrupt_one_is_corruption(target, monkeypatch):
    uri, options = target
    table = evolved_table(uri, options)
    monkeypatch.setattr(fetching, "WINDOW", 2)
    adds = sorted(table.add_actions(), key=lambda a: a.path)
    body = table.objects.get(table.uri.key(adds[5].path))
    table.objects.put(table.uri.key(adds[5].path), body[: len(body) // 2])
    with pytest.raises(CorruptDataError, match=f"at version {table.version} is not readable Parquet") as info:
        table.to_pyarrow_table()
    assert adds[5].path.rsplit("/", 1)[-1] in str(info.value)
    table.objects.put(table.uri.key(adds[5].path), body)
    table.objects.delete([table.uri.key(adds[3].path)])
    with pytest.raises(DataFileMissingError, match=f"at version {table.version} is gone") as info:
        table.to_pyarrow_table()
    assert adds[3].path.rsplit("/", 1)[-1] in str(info.value)
    # A filter that rules the missing file out does not need it.
    city = adds[3].partition_values.get("city")
    assert table.to_pyarrow_table(filter=pc.field("city") != city).num_rows > 0


def test_a_file_that_arrives_empty_is_fetched_again_not_reported_corrupt(target, monkeypatch):
    """Issue 18, item 6: a fetch that returned no bytes (a response that broke off) is a transient fault,
    not "Parquet file size is 0 bytes": each file's first opening gives an empty body here."""
    uri, options = target
    table = evolved_table(uri, options)
    monkeypatch.setattr(fetching, "WINDOW", 2)
    empty_first = OpeningRecorder(filesystem_for(table.uri, table.storage_options), first_read_empty=True)
    got = reader.to_pyarrow_table(table, filesystem=pafs.PyFileSystem(empty_first))
    assert got.sort_by("id").equals(table.to_pyarrow_table().sort_by("id"))
    assert len(empty_first.opened) == 2 * len(table.add_actions())


def test_fetching_stops_when_the_reader_stops_and_fails_at_the_failed_file(memory_uri):
    for i in range(3):
        write_table(memory_uri, people(i, 1, "Paris"), storage_options=None)
    table = Table(memory_uri)
    opening = OpeningRecorder(filesystem_for(table.uri))
    fs = pafs.PyFileSystem(opening)
    paths = [file_path(table.uri, a.path) for a in sorted(table.add_actions(), key=lambda a: a.path)]
    many = paths * 20
    fetched = fetch_whole(fs, many, ahead=4)
    first = next(fetched)
    assert first == fs.open_input_file(paths[0]).read_buffer()
    fetched.close()
    assert 1 <= len(opening.opened_by("dynacommit-fetch")) <= 1 + 4  # the one handed over, at most `ahead` more
    gone = paths[:1] + [paths[0] + ".gone"] + paths[1:]
    fetched = fetch_whole(fs, gone, ahead=4)
    assert next(fetched) == first
    with pytest.raises(FileNotFoundError):
        next(fetched)


def test_a_fetched_file_holds_no_python_object_so_arrow_threads_may_release_it_at_exit(memory_uri):
    """Issue 27, item 1: a reader could abort at interpreter exit (status -6, "terminate called without an
    active exception") after printing its rows. A dataset scan drops its last reference to a fragment's
    buffer on one of Arrow's threads, possibly after the read returned; a buffer over a Python bytes object
    then needs the GIL while the interpreter is finalizing (a core dump showed ~PyBuffer under
    PyGILState_Ensure). So what a fetch hands Arrow must not keep the fetched bytes object alive: the object
    store returns the very bytes object it holds, whose reference count says whether a buffer kept it."""
    import sys

    import pyarrow.parquet as pq

    from logstore import open_object_store
    from logstore.options import TableUri
    from table.data.files import fetch_one

    objects = open_object_store(TableUri.parse(memory_uri))
    body = pa.BufferOutputStream()
    pq.write_table(people(0, 5, "Oslo"), body)
    objects.put("t/file.parquet", body.getvalue().to_pybytes())
    stored = objects.get("t/file.parquet")
    references = sys.getrefcount(stored)
    fetched = fetch_one(filesystem_for(TableUri.parse(memory_uri)), f"{objects.bucket}/t/file.parquet", objects)
    assert fetched.error is None and fetched.buffer.to_pybytes() == stored
    assert sys.getrefcount(stored) == references, "the buffer keeps the Python bytes object alive"
    assert pq.read_table(pa.BufferReader(fetched.buffer)).equals(people(0, 5, "Oslo"))
