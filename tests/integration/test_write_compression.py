"""``write_table(compression=...)``: each of Spark's Parquet codec names writes its codec, says so in the
file name as parquet-mr names it, and the table reads the same through deltalake (delta-rs's own Parquet
reader). The codec each column chunk records is read back with DuckDB's ``parquet_metadata``, a Parquet
implementation other than the writer's."""

from __future__ import annotations

from urllib.parse import unquote

import deltalake
import duckdb
import pyarrow as pa
import pytest

from logstore import TableUri, open_object_store
from logstore.errors import InvalidArgumentError, TableNotFoundError
from table import Table, write_table
from tests.support.fault_harness import deltalake_options

# Spark's option value -> (the file name's ending, the codec Parquet's footer records)
EXPECTED = {
    "snappy": (".snappy.parquet", "SNAPPY"),
    "ZSTD": (".zstd.parquet", "ZSTD"),
    "gzip": (".gz.parquet", "GZIP"),
    "lz4": (".lz4raw.parquet", "LZ4_RAW"),
    "lz4_raw": (".lz4raw.parquet", "LZ4_RAW"),
    "brotli": (".br.parquet", "BROTLI"),
    "none": ("-c000.parquet", "UNCOMPRESSED"),
    "uncompressed": ("-c000.parquet", "UNCOMPRESSED"),
}


def rows(n: int = 500) -> pa.Table:
    return pa.table({"id": pa.array(range(n), pa.int64()), "s": [f"value {i % 7}" for i in range(n)]})


def test_each_spark_codec_name_writes_that_codec_and_names_it_in_the_file(s3_uri, storage_options, tmp_path):
    data = rows()
    objects = open_object_store(s3_uri, storage_options=storage_options)
    for n, (value, (ending, codec)) in enumerate(EXPECTED.items()):
        uri = f"{s3_uri}-{n}"
        write_table(uri, data, storage_options=storage_options, compression=value)
        [add] = Table(uri, storage_options=storage_options).add_actions()
        assert add.path.endswith(ending) and add.path.count(".") == ending.count("."), (value, add.path)
        local = tmp_path / f"{n}.parquet"
        local.write_bytes(objects.get(TableUri.parse(uri).key(unquote(add.path))))
        footer = duckdb.sql(f"SELECT DISTINCT compression FROM parquet_metadata('{local}')").fetchall()
        recorded = {c for (c,) in footer}
        assert recorded == {codec}, value
        theirs = deltalake.DeltaTable(uri, storage_options=deltalake_options(storage_options)).to_pyarrow_table()
        assert theirs.sort_by("id").equals(data), value


@pytest.mark.parametrize(("value", "message"), [
    ("zstandard", r"unknown compression 'zstandard': use one of snappy, zstd, gzip, lz4, lz4_raw, brotli, "
                  r"uncompressed, none"),
    ("lzo", r"unknown compression 'lzo' \(pyarrow cannot write LZO-compressed Parquet\)"),
])
def test_an_unknown_codec_is_refused_before_the_table_is_touched(s3_uri, storage_options, value, message):
    with pytest.raises(InvalidArgumentError, match=message):
        write_table(s3_uri, rows(), storage_options=storage_options, compression=value)
    with pytest.raises(TableNotFoundError):
        Table(s3_uri, storage_options=storage_options)
