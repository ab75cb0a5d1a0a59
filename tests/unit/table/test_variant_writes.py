"""Variant columns written (table.data.variant): Spark's variant table (delta-rs's ``spark-variant-checkpoint``:
variants at the top level and inside arrays, structs and maps) takes appends of its own values and of values
PySpark's encoder built, DML keeps them, statistics take Spark's shape, and deltalake reads it all back; a
value that is not in the Variant binary encoding is refused."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from logstore.errors import InvalidArgumentError
from table import Table, write_table
from table.data.variant import problem
from tests.support.corpus import DATA, canonical, deltalake_rows, to_directory, to_memory

SPARK_TABLE = DATA / "delta-rs" / "spark-variant-checkpoint"


def new_files(before: Table, after: Table) -> list:
    old = {f.path for f in before.snapshot.files}
    return [f for f in after.snapshot.files if f.path not in old]


@pytest.mark.interop
def test_appends_and_deletes_on_sparks_variant_table_read_back_by_deltalake(tmp_path):
    uri = to_memory(SPARK_TABLE)
    before = Table(uri)
    rows = before.to_pyarrow_table()
    write_table(uri, rows.slice(0, 3))
    after = Table(uri)
    (added,) = new_files(before, after)
    spark_stats = json.loads(before.snapshot.files[0].stats)
    ours = json.loads(added.stats)
    assert ours["nullCount"].keys() == spark_stats["nullCount"].keys()  # one nullCount per variant, as Spark's
    assert ours["nullCount"]["v"] == 0 and ours["nullCount"]["struct_of_variants"] == {"v": 0}
    assert "v" not in ours["minValues"]
    after.delete("id = 1")
    final = Table(uri).to_pyarrow_table()
    expected = pa.concat_tables([rows, rows.slice(0, 3)]).filter(pa.compute.not_equal(
        pa.concat_tables([rows, rows.slice(0, 3)])["id"], 1))
    assert canonical(final) == canonical(expected)
    assert canonical(deltalake_rows(to_directory(Table(uri), tmp_path / "copy"))) == canonical(expected)


@pytest.mark.interop
def test_values_built_by_pysparks_encoder_are_written_and_decode_back():
    pytest.importorskip("pyspark")
    from pyspark.sql.variant_utils import VariantUtils

    uri = to_memory(SPARK_TABLE)
    template = Table(uri).to_pyarrow_table().slice(0, 1)
    documents = ['{"a": 1, "b": [1, 2.5, "x", null, true]}', '"a string"', '[]', '12345678901234']
    for document in documents:
        value, metadata = VariantUtils.parse_json(document)
        row = template.to_pylist()[0]
        row["id"], row["v"] = 1000 + documents.index(document), {"metadata": metadata, "value": value}
        write_table(uri, pa.Table.from_pylist([row], schema=template.schema))
    got = {r["id"]: r["v"] for r in Table(uri).to_pyarrow_table().to_pylist() if r["id"] >= 1000}
    assert [json.loads(VariantUtils.to_json(got[1000 + i]["value"], got[1000 + i]["metadata"]))
            for i in range(len(documents))] == [json.loads(d) for d in documents]


def test_a_value_outside_the_binary_encoding_is_refused_naming_the_row():
    uri = to_memory(SPARK_TABLE)
    before = Table(uri)
    rows = before.to_pyarrow_table().slice(0, 2).to_pylist()
    rows[1]["v"] = {"metadata": b"\x01\x00\x00", "value": b"\x02\x05"}  # an object of 5 fields: runs past the end
    with pytest.raises(InvalidArgumentError, match=r"row 1 of variant column 'v' .* not a value in the Variant "
                                                   r"binary encoding"):
        write_table(uri, pa.Table.from_pylist(rows, schema=before.schema))
    assert Table(uri).version == before.version


def test_the_encoding_check_knows_each_kind_of_value():
    empty = b"\x01\x00\x00"  # version 1, no strings
    assert problem(empty, b"\x00") is None                          # null
    assert problem(empty, b"\x0c\x2a") is None                      # int8 42
    assert problem(empty, b"\x10\x2a") == "a primitive value runs past the end"   # int16, one byte given
    assert problem(empty, b"\x09ab") is None                        # short string of length 2
    assert problem(empty, b"\x09abc") == "its value holds 1 byte(s) after the encoded value"
    assert problem(b"\x02\x00\x00", b"\x00") == "its metadata has version 2, not 1"
