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


def test_the_vectorized_check_judges_every_value_as_the_row_by_row_walk_does():
    """``suspects`` (numpy over a whole column) must flag exactly the rows ``problem`` (the walk of one
    value) finds malformed: valid values of every shape PySpark's encoder builds (long strings, wide and
    deep containers, large element counts), each damaged at random (bytes changed, cut, added), nulls, and a
    sliced column."""
    import random

    from table.data.variant import suspects
    from table.log.schema_arrow import VARIANT_ARROW_TYPE

    pytest.importorskip("pyspark")
    from pyspark.sql.variant_utils import VariantUtils

    rng = random.Random(25)

    def document(depth: int):
        kind = rng.randrange(7 if depth < 6 else 4)
        if kind == 0:
            return rng.choice([None, True, False, 0, -7, 300, 70000, 2**40, 1.5, "x" * rng.randrange(0, 90)])
        if kind in (1, 2, 3):
            return rng.choice([rng.randrange(-2**63, 2**63), rng.random(), "é" * rng.randrange(60, 70)])
        if kind in (4, 5):
            return {f"k{rng.randrange(400)}": document(depth + 1) for _ in range(rng.choice([0, 1, 3, 8]))}
        return [document(depth + 1) for _ in range(rng.choice([0, 2, 5]))]

    encoded = [VariantUtils.parse_json(json.dumps(document(0))) for _ in range(300)]
    encoded += [VariantUtils.parse_json(json.dumps(list(range(300)))),                # > 255 elements: large
                VariantUtils.parse_json(json.dumps({f"f{i}": i for i in range(300)})),  # 2-byte field ids
                VariantUtils.parse_json(json.dumps(json.loads("[" * 60 + "1" + "]" * 60)))]
    rows = []
    for value, metadata in encoded:
        rows.append((metadata, value))
        for _ in range(4):
            meta, val = bytearray(metadata), bytearray(value)
            target = val if rng.random() < 0.8 or not meta else meta
            damage = rng.randrange(3)
            if damage == 0 and target:
                target[rng.randrange(len(target))] = rng.randrange(256)
            elif damage == 1 and target:
                del target[rng.randrange(len(target)):]
            else:
                target.extend(rng.randbytes(rng.randrange(1, 3)))
            rows.append((bytes(meta), bytes(val)))
    one_string = b"\x01\x01\x00\x01a"  # the dictionary ["a"]: field id 0 is "a", field id 1 does not exist
    rows += [(b"\x01\x00\x00", None), (None, b"\x00"), (b"", b""), (b"\x01\x00\x00", b""),
             (one_string, b"\x02\x01\x00\x00\x01\x00"), (one_string, b"\x02\x01\x01\x00\x01\x00")]
    metadata = pa.array([m for m, _ in rows] + [None], pa.binary())
    value = pa.array([v for _, v in rows] + [None], pa.binary())
    mask = pa.array([False] * len(rows) + [True])
    column = pa.StructArray.from_arrays([metadata, value], fields=list(VARIANT_ARROW_TYPE), mask=mask)
    expected = [problem(m, v) is not None for m, v in rows] + [False]
    assert 300 < sum(expected) < len(rows) - 300  # both kinds, many of each
    assert expected[-3:-1] == [False, True]
    assert suspects(column).tolist() == expected
    assert suspects(column.slice(7, 500)).tolist() == expected[7:507]


def test_an_append_without_a_nullable_struct_of_variants_column_writes_it_as_null(tmp_path):
    """A column the data lacks is written as nulls (as Delta does); a struct holding a variant has NOT NULL
    fields inside (the variant's metadata and value), which a null struct must still satisfy."""
    uri = to_memory(SPARK_TABLE)
    before = Table(uri).to_pyarrow_table()
    given = before.select(["id", "v"]).slice(0, 2)
    write_table(uri, given)
    after = Table(uri).to_pyarrow_table()
    expected = pa.concat_tables([before, pa.Table.from_pylist(
        [dict(r, **{c: None for c in before.column_names if c not in ("id", "v")}) for r in given.to_pylist()],
        schema=before.schema)])
    assert canonical(after) == canonical(expected)
    assert canonical(deltalake_rows(to_directory(Table(uri), tmp_path / "copy"))) == canonical(expected)


def test_nulls_under_a_null_variant_are_no_values_but_a_null_inside_a_present_one_is_refused():
    """Spark's Arrow batches hold nulls in a variant's metadata and value under a null variant (inside a
    struct, an array): those are written as the null variant they are; a present variant without its
    metadata is refused."""
    uri = to_memory(SPARK_TABLE)
    before = Table(uri)
    loose = pa.struct([("metadata", pa.binary()), ("value", pa.binary())])
    nulls = pa.array([None, None], pa.binary())
    inner = pa.StructArray.from_arrays([nulls, nulls], fields=list(loose), mask=pa.array([True, True]))
    given = pa.table({"id": pa.array([500, 501], pa.int64()),
                      "struct_of_variants": pa.StructArray.from_arrays([inner], names=["v"]),
                      "array_of_variants": pa.ListArray.from_arrays(pa.array([0, 1, 2], pa.int32()), inner)})
    write_table(uri, given)
    got = {r["id"]: r for r in Table(uri).to_pyarrow_table().to_pylist() if r["id"] >= 500}
    assert got[500]["struct_of_variants"] == {"v": None} and got[501]["array_of_variants"] == [None]
    present = pa.StructArray.from_arrays([nulls, pa.array([b"\x00", b"\x00"])], fields=list(loose))
    with pytest.raises(Exception, match="is NOT NULL, and a present struct holds a null in it"):
        write_table(uri, given.set_column(1, "struct_of_variants", pa.StructArray.from_arrays([present], names=["v"])))
    assert Table(uri).version == before.version + 1
