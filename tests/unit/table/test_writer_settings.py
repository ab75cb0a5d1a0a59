"""The Parquet settings every writer takes from ``table.data.writer_settings``, read back from the files.

Each test writes through a public entry point (``write_table``, DELETE, OPTIMIZE, a change data feed)
and checks the written files' footers with pyarrow: the codec, which columns have statistics, the
encodings, the row group and file size bounds. The expectations come from the table's properties and
from the data, not from the settings module.
"""

from __future__ import annotations

import io
import random

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from logstore.errors import InvalidArgumentError
from table import Table, write_table
from table.data.writer_settings import WriterSettings, column_encodings
from table.log import properties


def rows(start: int, count: int) -> pa.Table:
    ids = pa.array(range(start, start + count), pa.int64())
    # id: sorted, unique; k: 8 values; h: unique, scattered over int64; s: unique strings; city: 3 values
    return pa.table({
        "id": ids,
        "k": pc.cast(pc.bit_wise_and(ids, 7), pa.int32()),
        "h": pa.array([random.Random(i).getrandbits(63) for i in range(start, start + count)], pa.int64()),
        "s": pc.cast(pc.multiply(ids, 2654435761), pa.string()),
        "city": pa.array([["Paris", "Lyon", None][i % 3] for i in range(count)]),
        "ts": pc.cast(pc.add(pc.multiply(ids, 1_000_000), 1_700_000_000_000_000), pa.timestamp("us", tz="UTC")),
    })


def footers(table: Table, *, change_data: bool = False) -> list[pq.FileMetaData]:
    """The footers of the table's data files (or of every change data file in its bucket)."""
    if change_data:
        keys = [info.key for info in table.objects.list(table.uri.key("_change_data/"))]
    else:
        keys = [table.uri.key(a.path) for a in table.snapshot.files]
    return [pq.read_metadata(io.BytesIO(table.objects.get(key))) for key in keys]


def chunk(metadata: pq.FileMetaData, name: str, group: int = 0) -> pq.ColumnChunkMetaData:
    rg = metadata.row_group(group)
    return next(rg.column(i) for i in range(rg.num_columns) if rg.column(i).path_in_schema == name)


def test_near_unique_columns_lose_the_dictionary_and_sorted_integers_are_delta_packed(memory_uri):
    write_table(memory_uri, rows(0, 5000))
    (meta,) = footers(Table(memory_uri))
    assert "DELTA_BINARY_PACKED" in chunk(meta, "id").encodings
    assert "DELTA_BINARY_PACKED" in chunk(meta, "ts").encodings
    for plain in ("h", "s"):  # unique, but neighbours are far apart / not integers
        assert "RLE_DICTIONARY" not in chunk(meta, plain).encodings
        assert "DELTA_BINARY_PACKED" not in chunk(meta, plain).encodings
    for repeated in ("k", "city"):
        assert "RLE_DICTIONARY" in chunk(meta, repeated).encodings
    assert Table(memory_uri).to_pyarrow_table().sort_by("id").equals(rows(0, 5000))


def test_the_codec_is_the_writes_option_else_the_tables_property_else_snappy(memory_uri):
    write_table(memory_uri, rows(0, 100), configuration={properties.PARQUET_CODEC: "ZSTD"})
    write_table(memory_uri, rows(100, 100))
    write_table(memory_uri, rows(200, 100), compression="gzip")
    codecs = sorted({chunk(m, "id").compression for m in footers(Table(memory_uri))})
    assert codecs == ["GZIP", "ZSTD"]
    names = sorted(a.path.rsplit(".", 2)[-2] for a in Table(memory_uri).snapshot.files)
    assert names == ["gz", "zstd", "zstd"]

    other = memory_uri + "-plain"
    write_table(other, rows(0, 10))
    assert chunk(footers(Table(other))[0], "id").compression == "SNAPPY"


def test_row_level_rewrites_optimize_and_change_data_follow_the_tables_codec(memory_uri):
    config = {properties.PARQUET_CODEC: "zstd", properties.CHANGE_DATA_FEED: "true"}
    for start in range(0, 400, 100):
        write_table(memory_uri, rows(start, 100), configuration=config if start == 0 else None)
    table = Table(memory_uri)
    table.delete("id % 10 = 3")
    table.update({"k": "k + 100"}, predicate="id < 50")
    assert {chunk(m, "id").compression for m in footers(Table(memory_uri), change_data=True)} == {"ZSTD"}
    Table(memory_uri).optimize()
    after = Table(memory_uri)
    assert len(after.snapshot.files) == 1
    assert chunk(footers(after)[0], "id").compression == "ZSTD"
    every = pa.concat_tables([rows(s, 100) for s in range(0, 400, 100)]).to_pylist()
    expected = [dict(r, k=r["k"] + 100) if r["id"] < 50 else r for r in every if r["id"] % 10 != 3]
    assert after.to_pyarrow_table().sort_by("id").to_pylist() == expected


def test_statistics_are_written_only_for_the_indexed_columns(memory_uri):
    write_table(memory_uri, rows(0, 300), configuration={properties.NUM_INDEXED_COLS: "2"})
    (meta,) = footers(Table(memory_uri))
    assert chunk(meta, "id").is_stats_set and chunk(meta, "k").is_stats_set
    assert [n for n in ("h", "s", "city", "ts") if chunk(meta, n).is_stats_set] == []
    stats = Table(memory_uri).snapshot.files[0].stats
    assert '"id":0' in stats and '"k":0' in stats and '"h"' not in stats

    every = memory_uri + "-all"
    write_table(every, rows(0, 300), configuration={properties.NUM_INDEXED_COLS: "-1"})
    (meta,) = footers(Table(every))
    assert all(chunk(meta, n).is_stats_set for n in ("id", "k", "h", "s", "city", "ts"))


def test_the_target_file_size_property_cuts_appends_and_rewrites(memory_uri):
    data = pa.concat_tables([rows(s, 20_000) for s in range(0, 200_000, 20_000)])
    write_table(memory_uri, data, configuration={properties.TARGET_FILE_SIZE: "256kb"})
    files = Table(memory_uri).snapshot.files
    assert len(files) > 3
    # a file is closed once it reaches the target: every file but the last holds at least that much, and
    # none exceeds it by more than one row group of encoded rows
    sizes = sorted(f.size for f in files)
    assert all(size < 2 * 256 * 1024 for size in sizes)
    Table(memory_uri).delete("id % 1000 = 0")
    rewritten = Table(memory_uri).snapshot.files
    assert len(rewritten) > 3 and all(f.size < 2 * 256 * 1024 for f in rewritten)
    assert Table(memory_uri).to_pyarrow_table().num_rows == 200_000 - 200


def test_row_groups_hold_at_most_row_group_bytes_of_arrow_data():
    settings = WriterSettings.of(row_group_bytes=64 * 1024)
    assert settings.row_group_bytes == 64 * 1024
    with pytest.raises(InvalidArgumentError, match="row_group_bytes"):
        WriterSettings.of(row_group_bytes=0)


@pytest.mark.parametrize(("value", "message"), [("fast", "not a codec|unknown compression"), ("12 parsecs", "size")])
def test_bad_writer_properties_are_refused_when_the_table_is_created(memory_uri, value, message):
    key = properties.PARQUET_CODEC if message.startswith("not") else properties.TARGET_FILE_SIZE
    with pytest.raises(InvalidArgumentError, match=key):
        write_table(memory_uri, rows(0, 1), configuration={key: value})


def test_encodings_follow_the_sample_not_the_type():
    few = pa.table({"a": pa.array([1, 2, 3] * 100, pa.int64()), "b": pa.array(range(300), pa.int64()),
                    "c": pa.array([None] * 300, pa.int64()), "d": pa.array([[1]] * 300)})
    dictionary, encodings = column_encodings(few)
    assert dictionary == ["a", "c", "d"] and encodings == {"b": "DELTA_BINARY_PACKED"}


def test_optimize_compacts_to_the_tables_target_file_size_unless_given(memory_uri):
    for start in range(0, 120_000, 20_000):
        write_table(memory_uri, rows(start, 20_000), configuration={properties.TARGET_FILE_SIZE: "5mb"}
                    if start == 0 else None)
    report = Table(memory_uri).optimize(dry_run=True)
    assert report.target_size == 5 * 1024 * 1024
    assert Table(memory_uri).optimize(dry_run=True, target_size=64 * 1024 * 1024).target_size == 64 * 1024 * 1024


def test_encodings_are_chosen_from_a_row_group_not_from_the_first_small_batch(memory_uri):
    # 100-row batches: every batch alone has 100 distinct values of 'k', the file has 1,000
    data = pa.table({"id": pa.array(range(50_000), pa.int64()),
                     "k": pa.array([i % 1000 for i in range(50_000)], pa.int64())})
    write_table(memory_uri, pa.RecordBatchReader.from_batches(data.schema, data.to_batches(max_chunksize=100)))
    (meta,) = footers(Table(memory_uri))
    assert "RLE_DICTIONARY" in chunk(meta, "k").encodings
    assert "DELTA_BINARY_PACKED" in chunk(meta, "id").encodings
    assert Table(memory_uri).to_pyarrow_table().sort_by("id").equals(data)
