"""The staging committer's task and job sides (table/staging.py) on the in-memory store and on moto S3."""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import pickle
import threading
import time
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from logstore import ObjectStore, StorageError, TableUri, open_object_store
from logstore.errors import InvalidArgumentError
from logstore.objects import MemoryObjectStore
from table.data.files import MultipartSink
from table.data.pendingset import (
    PendingSet,
    PendingSetError,
    encode_path,
    partition_dir,
    validate_pendingsets,
)
from table.data.staging import MIN_PART_SIZE, StagingWriter
from table.data.stats import compute_stats
from table.data.writer_settings import WriterSettings
from table.data.uploads import abort_pending, abort_stray_uploads, complete_pending
from table.errors import SchemaMismatchError, UnsupportedTypeError

JOB = "0f8fad5b-d9cb-469f-a165-70867728950e"
SCHEMA = pa.schema([("p", pa.string()), ("id", pa.int64()), ("name", pa.string())])


def rows(start: int, count: int, partition: str | None = "a") -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table({"p": pa.array([partition] * count, pa.string()), "id": pa.array(ids, pa.int64()),
                     "name": pa.array([f"name-{i}" for i in ids])}, schema=SCHEMA)


@pytest.fixture
def uri(memory_uri) -> TableUri:
    return TableUri.parse(memory_uri)


@pytest.fixture
def objects(uri) -> MemoryObjectStore:
    store = open_object_store(uri)
    assert isinstance(store, MemoryObjectStore)
    return store


def writer(objects: ObjectStore, uri: TableUri, *, target_file_size: int | None = None,
           row_group_bytes: int | None = None, **kwargs) -> StagingWriter:
    options = dict(schema=SCHEMA, partition_by=["p"], job_id=JOB, task_id=7,
                   settings=WriterSettings.of(target_file_size=target_file_size, row_group_bytes=row_group_bytes))
    options.update(kwargs)
    return StagingWriter(objects, uri, **options)


def pending_set(objects, uri, **kwargs) -> PendingSet:
    w = writer(objects, uri, **kwargs)
    w.write(rows(0, 10, "a"))
    w.write(rows(10, 5, "b c/d"))
    return w.finish()


# --- staging and completing ------------------------------------------------------------------------


def test_uploads_stay_incomplete_until_complete_pending(objects, uri):
    pending = pending_set(objects, uri)
    keys = sorted(f.key for f in pending.files)
    assert len(keys) == 2
    assert all(objects.head(k) is None for k in keys)
    assert sorted(u.key for u in objects.list_uploads(uri.key(""))) == keys

    adds = complete_pending(objects, [pending])

    assert objects.list_uploads(uri.key("")) == []
    assert sorted(uri.key(unquote(a.path)) for a in adds) == keys
    for staged, add in zip(pending.files, adds):
        assert objects.head(staged.key).size == staged.size == add.size
        assert add.data_change and add.stats == staged.stats and add.partition_values == staged.partition_values


def test_files_are_hive_partitioned_without_partition_columns_and_carry_job_and_task(objects, uri):
    pending = pending_set(objects, uri)
    by_partition = {f.partition_values["p"]: f for f in pending.files}
    assert by_partition["b c/d"].key == uri.key(f"p=b%20c%2Fd/part-00007-{JOB}-c000.snappy.parquet")
    assert by_partition["b c/d"].path == f"p=b%2520c%252Fd/part-00007-{JOB}-c000.snappy.parquet"
    complete_pending(objects, [pending])
    data = pq.read_table(io.BytesIO(objects.get(by_partition["a"].key)))
    assert data.column_names == ["id", "name"]
    assert data.column("id").to_pylist() == list(range(10))
    stats = json.loads(by_partition["a"].stats)
    assert stats == {"numRecords": 10, "minValues": {"id": 0, "name": "name-0"},
                     "maxValues": {"id": 9, "name": "name-9"}, "nullCount": {"id": 0, "name": 0}}


def test_null_and_empty_partition_values_share_the_hive_default_directory(objects, uri):
    w = writer(objects, uri)
    w.write(rows(0, 2, None))
    w.write(rows(2, 3, ""))
    (staged,) = w.finish().files
    assert staged.partition_values == {"p": None}
    assert staged.num_records == 5
    assert staged.key == uri.key(f"p=__HIVE_DEFAULT_PARTITION__/part-00007-{JOB}-c000.snappy.parquet")


def test_files_roll_at_the_target_size(objects, uri):
    w = writer(objects, uri, partition_by=[], target_file_size=20_000, part_size=4096, _allow_small_parts=True)
    for start in range(0, 20_000, 1000):
        w.write(rows(start, 1000))
    pending = w.finish()
    names = [f.key.rsplit("-", 1)[-1] for f in pending.files]
    assert len(names) > 2
    assert names == [f"c{i:03d}.snappy.parquet" for i in range(len(names))]
    assert all(len(f.parts) > 1 for f in pending.files[:-1])
    assert all(len(p.etag) > 0 for f in pending.files for p in f.parts)
    assert sum(f.num_records for f in pending.files) == 20_000
    complete_pending(objects, [pending])
    ids = [i for f in pending.files for i in pq.read_table(io.BytesIO(objects.get(f.key))).column("id").to_pylist()]
    assert ids == list(range(20_000))


def test_parts_below_s3_minimum_are_refused_outside_the_memory_store(uri):
    from logstore.options import StorageOptions
    from logstore.s3 import S3ObjectStore

    s3 = S3ObjectStore("bucket", StorageOptions())
    with pytest.raises(ValueError, match="minimum part size"):
        writer(s3, uri, part_size=MIN_PART_SIZE - 1, _allow_small_parts=True)


def test_least_recently_written_file_is_closed_beyond_max_open_files(objects, uri):
    w = writer(objects, uri, max_open_files=2)
    for partition in ("a", "b", "c", "a"):
        w.write(rows(0, 3, partition))
    pending = w.finish()
    keys = sorted(f.key.rsplit("/", 2)[-2] + "/" + f.key.rsplit("-", 1)[-1] for f in pending.files)
    assert keys == ["p=a/c000.snappy.parquet", "p=a/c001.snappy.parquet", "p=b/c000.snappy.parquet",
                    "p=c/c000.snappy.parquet"]


def test_abort_aborts_open_and_finished_uploads(objects, uri):
    w = writer(objects, uri, partition_by=[], target_file_size=3000, part_size=4096, _allow_small_parts=True)
    for start in range(0, 3000, 500):
        w.write(rows(start, 500))
    assert len(objects.list_uploads(uri.key(""))) > 1
    w.abort()
    assert objects.list_uploads(uri.key("")) == []
    assert list(objects.list(uri.key(""))) == []
    with pytest.raises(ValueError, match="aborted"):
        w.write(rows(0, 1))


def test_context_manager_aborts_on_error(objects, uri):
    with pytest.raises(RuntimeError, match="boom"):
        with writer(objects, uri) as w:
            w.write(rows(0, 5))
            raise RuntimeError("boom")
    assert objects.list_uploads(uri.key("")) == []


def test_partitioned_values_of_many_types_are_serialized_per_delta(objects, uri):
    schema = pa.schema([("i", pa.int32()), ("d", pa.date32()), ("t", pa.timestamp("us", tz="UTC")),
                        ("b", pa.bool_()), ("x", pa.float64())])
    w = StagingWriter(objects, uri, schema=schema, partition_by=["i", "d", "t", "b"], job_id=JOB, task_id=0)
    w.write(pa.table({"i": pa.array([-3], pa.int32()), "d": [dt.date(2024, 2, 29)],
                      "t": pa.array([dt.datetime(2024, 1, 2, 3, 4, 5, 6)], pa.timestamp("us", tz="UTC")),
                      "b": [True], "x": [1.5]}))
    (staged,) = w.finish().files
    assert staged.partition_values == {"i": "-3", "d": "2024-02-29", "t": "2024-01-02 03:04:05.000006", "b": "true"}
    assert staged.key.startswith(uri.key("i=-3/d=2024-02-29/t=2024-01-02%2003%3A04%3A05.000006/b=true/"))


# --- input validation ------------------------------------------------------------------------------


def test_schema_mismatch_lists_differences_and_stages_nothing(objects, uri):
    w = writer(objects, uri)
    bad = pa.table({"p": ["a"], "id": ["not a number"], "extra": [1]})
    with pytest.raises(SchemaMismatchError) as info:
        w.write(bad)
    text = str(info.value)
    assert "'id'" in text and "'extra'" in text and "'name'" in text
    assert objects.list_uploads(uri.key("")) == []


def test_missing_partition_column_is_named(objects, uri):
    w = writer(objects, uri)
    with pytest.raises(SchemaMismatchError, match="partition column 'p' is missing"):
        w.write(rows(0, 3).drop_columns(["p"]))


def test_unsupported_type_is_refused_naming_the_column(objects, uri):
    w = writer(objects, uri)
    data = rows(0, 2).append_column("u", pa.array([1, 2], pa.uint64()))
    with pytest.raises(UnsupportedTypeError, match="'u'"):
        w.write(data)
    with pytest.raises(UnsupportedTypeError, match="'when'"):
        StagingWriter(objects, uri, schema=pa.schema([("when", pa.time64("us"))]), partition_by=[], job_id=JOB,
                      task_id=0)


def test_columns_in_another_order_and_encodings_are_conformed(objects, uri):
    w = writer(objects, uri, partition_by=[])
    data = rows(0, 3)
    w.write(pa.table({"name": data.column("name").cast(pa.large_string()), "id": data.column("id"),
                      "p": data.column("p").dictionary_encode()}))
    pending = w.finish()
    complete_pending(objects, [pending])
    (staged,) = pending.files
    read = pq.read_table(io.BytesIO(objects.get(staged.key)))
    assert read.schema == SCHEMA
    assert read.equals(data)


def test_bad_job_id_is_refused(objects, uri):
    with pytest.raises(ValueError, match="job id"):
        writer(objects, uri, job_id="../escape")


# --- stats of files spanning row groups -----------------------------------------------------------


def test_a_file_written_in_several_row_groups_has_the_stats_of_all_its_rows(objects, uri):
    # every write is a row group of its own
    w = writer(objects, uri, partition_by=[], _allow_small_parts=True, part_size=1024, row_group_bytes=1)
    batches = [rows(0, 3), rows(3, 4, None), rows(7, 2)]
    for batch in batches:
        w.write(batch)
    pending = w.finish()
    (add,) = complete_pending(objects, [pending])
    data = io.BytesIO(objects.get(pending.files[0].key))
    assert pq.ParquetFile(data).metadata.num_row_groups == 3
    assert add.stats == compute_stats(pq.read_table(data))


def test_rows_are_encoded_once_a_row_group_fills_and_not_before(objects, uri):
    w = writer(objects, uri, partition_by=[], _allow_small_parts=True, part_size=1024,
               row_group_bytes=rows(0, 10).nbytes * 2)
    for start in range(0, 50, 10):
        w.write(rows(start, 10))
    pending = w.finish()
    complete_pending(objects, [pending])
    data = io.BytesIO(objects.get(pending.files[0].key))
    groups = pq.ParquetFile(data).metadata
    assert [groups.row_group(i).num_rows for i in range(groups.num_row_groups)] == [20, 20, 10]


@pytest.mark.parametrize("size", [0, -1])
def test_a_non_positive_row_group_size_is_refused(objects, uri, size):
    with pytest.raises(InvalidArgumentError, match="row_group_bytes"):
        writer(objects, uri, row_group_bytes=size)


# --- the PendingSet module ------------------------------------------------------------------------


def test_pendingset_error_survives_pickling():
    error = pickle.loads(pickle.dumps(PendingSetError("bad", field="files[0].key")))
    assert isinstance(error, PendingSetError) and error.field == "files[0].key"


# --- PendingSet -----------------------------------------------------------------------------------


def test_pendingset_round_trips_through_json_and_pickle(objects, uri):
    pending = pending_set(objects, uri)
    assert PendingSet.load(pending.model_dump_json()) == pending
    assert pickle.loads(pickle.dumps(pending)) == pending
    pending.validate_for(uri, JOB, partition_columns=["p"])


def test_pendingset_load_refuses_unknown_fields_and_wrong_types(objects, uri):
    doc = json.loads(pending_set(objects, uri).model_dump_json())
    doc["files"][0]["surprise"] = 1
    with pytest.raises(PendingSetError, match="files.0.surprise"):
        PendingSet.load(json.dumps(doc))
    doc = json.loads(pending_set(objects, uri).model_dump_json())
    doc["files"][0]["size"] = "12"
    with pytest.raises(PendingSetError, match="files.0.size"):
        PendingSet.load(json.dumps(doc))
    with pytest.raises(PendingSetError, match="format_version"):
        PendingSet.load(json.dumps({**doc, "format_version": 2}))
    with pytest.raises(PendingSetError):
        PendingSet.load(b"{not json")


def _tamper(doc: dict, change: str, uri: TableUri) -> None:
    first = doc["files"][0]
    if change == "table_path":
        doc["table_path"] = "s3://other/table"
    elif change == "job_id":
        doc["job_id"] = "another-job"
    elif change == "key_outside_table":
        first["key"] = "elsewhere/" + first["key"].rsplit("/", 1)[-1]
    elif change == "key_in_log":
        first["key"] = uri.key("_delta_log/" + first["key"].rsplit("/", 1)[-1])
        first["path"] = encode_path(uri.relative(first["key"]))
    elif change == "dot_dot":
        first["key"] = uri.key("p=a/../" + first["key"].rsplit("/", 1)[-1])
        first["path"] = encode_path(uri.relative(first["key"]))
    elif change == "foreign_file_name":
        first["key"] = uri.key("p=a/part-00007-other-job-c000.snappy.parquet")
        first["path"] = encode_path(uri.relative(first["key"]))
    elif change == "path_mismatch":
        first["path"] = "p=a/other.parquet"
    elif change == "duplicate_key":
        doc["files"][1] = dict(doc["files"][1], key=first["key"], path=first["path"])
    elif change == "parts_reordered":
        first["parts"] = [dict(first["parts"][0], number=2), dict(first["parts"][0], number=1)]
    elif change == "parts_gap":
        first["parts"] = [dict(first["parts"][0], number=2)]
    elif change == "no_parts":
        first["parts"] = []
    elif change == "bad_etag":
        first["parts"][0]["etag"] = "<script>"
    elif change == "negative_size":
        first["size"] = -1
    elif change == "negative_records":
        first["num_records"] = -1
    elif change == "stats_disagree":
        first["stats"] = json.dumps({"numRecords": first["num_records"] + 1})
    elif change == "stats_not_json":
        first["stats"] = "{"
    elif change == "partition_values":
        first["partition_values"] = {"q": "a"}
    elif change == "partition_dir":
        first["partition_values"] = {"p": "zzz"}
    elif change == "negative_task":
        doc["task_id"] = -1
    else:
        raise AssertionError(change)


TAMPERING = {
    "table_path": "table_path", "job_id": "job_id", "key_outside_table": "files[0].key",
    "key_in_log": "files[0].key", "dot_dot": "files[0].key", "foreign_file_name": "files[0].key",
    "path_mismatch": "files[0].path", "duplicate_key": "files[1].key", "parts_reordered": "files[0].parts[0].number",
    "parts_gap": "files[0].parts[0].number", "no_parts": "files[0].parts", "bad_etag": "files[0].parts[0].etag",
    "negative_size": "files[0].size", "negative_records": "files[0].num_records", "stats_disagree": "files[0].stats",
    "stats_not_json": "files[0].stats", "partition_values": "files[0].partition_values",
    "partition_dir": "files[0].partition_values", "negative_task": "task_id",
}


@pytest.mark.parametrize("change", sorted(TAMPERING))
def test_tampered_pendingset_fails_validation_naming_the_field(objects, uri, change):
    doc = json.loads(pending_set(objects, uri).model_dump_json())
    _tamper(doc, change, uri)
    tampered = PendingSet.load(json.dumps(doc))
    with pytest.raises(PendingSetError) as info:
        tampered.validate_for(uri, JOB, partition_columns=["p"])
    assert info.value.field == TAMPERING[change]
    assert TAMPERING[change] in str(info.value)
    assert pickle.loads(pickle.dumps(info.value)).field == info.value.field


def test_two_attempts_of_a_task_or_a_shared_key_fail_job_validation(objects, uri):
    first = pending_set(objects, uri)
    second = pending_set(objects, uri, attempt_id=1)
    with pytest.raises(PendingSetError, match="task 7 has more than one PendingSet"):
        validate_pendingsets([first, second], uri, JOB)
    other_task = second.model_copy(update={"task_id": 8})
    with pytest.raises(PendingSetError, match="staged by two tasks|part-00008"):
        validate_pendingsets([first, other_task], uri, JOB)


# --- job side: failures and strays -----------------------------------------------------------------


class FailingCompletion(MemoryObjectStore):
    """The memory store whose CompleteMultipartUpload fails for keys containing ``fail_on``."""

    def __init__(self, inner: MemoryObjectStore, fail_on: str):
        self.__dict__.update(inner.__dict__)
        self.fail_on = fail_on

    def complete_upload(self, key, upload_id, parts):
        if self.fail_on in key:
            raise StorageError(f"injected failure completing {key}", operation="s3:CompleteMultipartUpload")
        super().complete_upload(key, upload_id, parts)


def test_complete_pending_is_all_or_nothing(objects, uri):
    w = writer(objects, uri)
    for partition in "abcdef":
        w.write(rows(0, 3, partition))
    pending = w.finish()
    failing = FailingCompletion(objects, "p=d/")
    with pytest.raises(StorageError, match="injected"):
        complete_pending(failing, [pending], max_workers=2)
    assert list(objects.list(uri.key(""))) == []
    assert objects.list_uploads(uri.key("")) == []


def test_complete_pending_accepts_an_upload_its_own_retry_completed(objects, uri):
    pending = pending_set(objects, uri)
    complete_pending(objects, [pending])
    adds = complete_pending(objects, [pending])  # the uploads are gone, the objects are ours
    assert len(adds) == 2


def test_abort_stray_uploads_aborts_only_the_jobs_unkept_uploads(objects, uri):
    kept = pending_set(objects, uri)
    lost_attempt = pending_set(objects, uri, attempt_id=1)
    other_job = pending_set(objects, uri, job_id="other-job")
    assert abort_stray_uploads(objects, uri, JOB, [f.upload_id for f in kept.files]) == len(lost_attempt.files)
    remaining = {u.upload_id for u in objects.list_uploads(uri.key(""))}
    assert remaining == {f.upload_id for f in kept.files + other_job.files}
    assert abort_pending(objects, [kept, other_job]) == 4
    assert objects.list_uploads(uri.key("")) == []


# --- on S3 (moto) -------------------------------------------------------------------------------------


def test_on_s3_parts_respect_the_minimum_and_uploads_stay_invisible(s3_uri, storage_options):
    uri = TableUri.parse(s3_uri)
    s3 = open_object_store(uri, storage_options=storage_options)
    schema = pa.schema([("blob", pa.binary())])
    w = StagingWriter(s3, uri, schema=schema, partition_by=[], job_id=JOB, task_id=1, part_size=MIN_PART_SIZE)
    data = pa.table({"blob": [os.urandom(1 << 20) for _ in range(12)]}, schema=schema)
    for i in range(12):
        w.write(data.slice(i, 1))
    (staged,) = w.finish().files
    assert len(staged.parts) == 3 and staged.size > 12 << 20
    assert s3.head(staged.key) is None
    assert [u.upload_id for u in s3.list_uploads(uri.key(""))] == [staged.upload_id]
    complete_pending(s3, [PendingSet(table_path=uri.table_path, job_id=JOB, task_id=1, attempt_id=0, files=[staged])])
    assert s3.head(staged.key).size == staged.size
    assert s3.list_uploads(uri.key("")) == []
    assert pq.read_table(io.BytesIO(s3.get(staged.key))).equals(data)


def test_partition_dirs_are_escaped_as_delta_rs_escapes_them():
    assert partition_dir(["a", "b c"], {"a": "x=1/y:2 é~", "b c": None}) == (
        "a=x%3D1%2Fy%3A2%20%C3%A9~/b%20c=__HIVE_DEFAULT_PARTITION__/")
    assert encode_path("a=x%3D1%20/f") == "a=x%253D1%2520/f"


def test_not_null_columns_take_nullable_data_without_nulls_and_refuse_nulls(objects, uri):
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string())])
    w = StagingWriter(objects, uri, schema=schema, partition_by=[], job_id=JOB, task_id=0)
    w.write(pa.table({"id": [1, 2], "name": ["a", None]}))
    with pytest.raises(SchemaMismatchError, match="'id' is NOT NULL in the table, but the data holds 1 null"):
        w.write(pa.table({"id": [3, None], "name": ["c", "d"]}))
    (staged,) = w.finish().files
    assert staged.num_records == 2


# --- parts upload in the background -----------------------------------------------------------------


class _SlowThenFailingParts:
    """The memory store, whose part uploads take a moment (so several are under way at once), and refuse
    part ``fail_at`` when it is given."""

    def __init__(self, inner, fail_at: int | None = None):
        self._inner, self._fail_at = inner, fail_at
        self.concurrent = self.most_concurrent = 0
        self._lock = threading.Lock()

    def upload_part(self, key, upload_id, number, body):
        with self._lock:
            self.concurrent += 1
            self.most_concurrent = max(self.most_concurrent, self.concurrent)
        try:
            time.sleep(0.02)
            if number == self._fail_at:
                raise StorageError(f"injected: part {number} refused", operation="s3:UploadPart")
            return self._inner.upload_part(key, upload_id, number, body)
        finally:
            with self._lock:
                self.concurrent -= 1

    def __getattr__(self, name):
        return getattr(self._inner, name)


def test_parts_upload_several_at_a_time_and_come_back_in_order(objects, uri):
    slow = _SlowThenFailingParts(objects)
    sink = MultipartSink(slow, uri.key("f.bin"), part_size=1024, max_inflight=4)
    body = bytes(range(256)) * 40  # 10 parts of 1 KiB, and a last one of 0 bytes is not sent
    for start in range(0, len(body), 700):
        sink.write(body[start:start + 700])
    parts = sink.finish()
    assert [p.number for p in parts] == list(range(1, 11))
    assert slow.most_concurrent > 1
    objects.complete_upload(uri.key("f.bin"), sink.upload_id, parts)
    assert objects.get(uri.key("f.bin")) == body


def test_a_failed_part_is_raised_by_the_writer_and_the_upload_can_still_be_aborted(objects, uri):
    failing = _SlowThenFailingParts(objects, fail_at=2)
    sink = MultipartSink(failing, uri.key("f.bin"), part_size=1024, max_inflight=2)
    with pytest.raises(StorageError, match="part 2 refused"):
        for _ in range(8):
            sink.write(b"x" * 1024)
        sink.finish()
    sink.abort()
    assert objects.list_uploads(uri.key("")) == []
