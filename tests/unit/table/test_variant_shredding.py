"""Shredded variant columns (the Parquet format's Variant Shredding specification) reassembled into the
unshredded ``{metadata, value}`` form.

The shredded files are built by hand from the specification's own examples and written to Parquet with
pyarrow (so the typed columns go through their Parquet logical types); the independent expectation is
PySpark's Variant decoder (``VariantVal``): the reassembled value must decode to what the original value
encodes to when PySpark's own encoder builds it unshredded.
"""

from __future__ import annotations

import datetime
import decimal
import io
import json
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql.types import VariantVal

from logstore.errors import InvalidArgumentError
from table.data.shredding import is_shredded, needs_reassembly, reading_files, unshred
from table.data.variant import problem
from table.log.schema_arrow import VARIANT_ARROW_TYPE, is_variant

EMPTY = b"\x01\x00\x00"  # metadata version 1, empty dictionary


def encoded(text: str) -> VariantVal:
    return VariantVal.parseJson(text)


def through_parquet(column: pa.Array) -> pa.Array:
    """``column`` written to a Parquet file and read back."""
    sink = io.BytesIO()
    pq.write_table(pa.table({"v": column}), sink)
    return pq.read_table(io.BytesIO(sink.getvalue())).column("v").combine_chunks()


def shredded_type(typed: pa.DataType) -> pa.DataType:
    return pa.struct([pa.field("metadata", pa.binary(), nullable=False), ("value", pa.binary()),
                      ("typed_value", typed)])


def decoded(result: pa.Array) -> list:
    assert is_variant(result.type)
    out = []
    for row in result.to_pylist():
        if row is None:
            out.append(None)
            continue
        assert problem(row["metadata"], row["value"]) is None
        out.append(json.loads(VariantVal(row["value"], row["metadata"]).toJson()))
    return out


def test_a_shredded_integer_column_reads_as_the_values_the_specification_lists():
    """The specification's measurement example: 34, null, "n/a", 100, shredded as int64."""
    column = through_parquet(pa.array([
        {"metadata": EMPTY, "value": None, "typed_value": 34},
        {"metadata": EMPTY, "value": b"\x00", "typed_value": None},
        {"metadata": EMPTY, "value": encoded('"n/a"').value, "typed_value": None},
        {"metadata": EMPTY, "value": None, "typed_value": 100},
        None,
    ], shredded_type(pa.int64())))
    assert is_shredded(column.type)
    assert decoded(unshred(column)) == [34, None, "n/a", 100, None]


def _event_row(full: dict, shredded: tuple[str, ...], *, typed: bool = True) -> dict:
    """One row of the specification's event example: the fields of ``shredded`` in typed columns (or in
    their value column when not of the typed column's type), the rest in ``value``, against a metadata
    that holds every name (the residual object's names first, so that its field ids are the metadata's)."""
    rest = {k: v for k, v in full.items() if k not in shredded}
    metadata = encoded(json.dumps({**rest, **{k: 0 for k in shredded}})).metadata
    value = encoded(json.dumps(rest)).value if rest else None
    fields = {}
    for name in shredded:
        v = full.get(name, ...)
        if v is ... or not typed:
            fields[name] = {"value": None, "typed_value": None}
        elif name == "event_ts" and not isinstance(v, int):
            fields[name] = {"value": encoded(json.dumps(v)).value, "typed_value": None}
        elif v is None:
            fields[name] = {"value": b"\x00", "typed_value": None}
        else:
            fields[name] = {"value": None, "typed_value": v}
    return {"metadata": metadata, "value": value, "typed_value": fields}


def test_objects_fully_partially_and_not_shredded_read_as_their_fields():
    """The specification's event example, row by row: fully shredded, partially shredded (other fields
    in value), all shredded fields missing, not an object, a field missing, a field present and null, a
    field of another type than its typed column, an empty object, a null row."""
    typed = pa.struct([
        pa.field("event_type", pa.struct([("value", pa.binary()), ("typed_value", pa.string())]), nullable=False),
        pa.field("event_ts", pa.struct([("value", pa.binary()), ("typed_value", pa.int64())]), nullable=False),
    ])
    events = [
        {"event_type": "noop", "event_ts": 1729794114937},
        {"event_type": "login", "event_ts": 1729794146402, "email": "user@example.com"},
        {"error_msg": "malformed: ..."},
        {"event_ts": 1729794240241, "click": "_button"},
        {"event_type": None, "event_ts": 1729794954163},
        {"event_type": "noop", "event_ts": "2024-10-24"},
        {},
    ]
    shredded = ("event_type", "event_ts")
    rows = [_event_row(e, shredded) for e in events]
    rows.insert(3, {"metadata": EMPTY, "value": encoded('"malformed: not an object"').value, "typed_value": None})
    rows.append(None)
    column = through_parquet(pa.array(rows, shredded_type(typed)))
    expected = [*events[:3], "malformed: not an object", *events[3:], None]
    assert decoded(unshred(column)) == expected


def test_shredded_arrays_of_strings_read_as_the_specification_lists():
    """The specification's tags example, and an array whose elements are objects with a shredded array."""
    element = pa.struct([("value", pa.binary()), ("typed_value", pa.string())])
    typed = pa.list_(pa.field("element", element, nullable=False))
    column = through_parquet(pa.array([
        {"metadata": EMPTY, "value": None, "typed_value": [{"value": None, "typed_value": "comedy"},
                                                           {"value": None, "typed_value": "drama"}]},
        {"metadata": EMPTY, "value": None, "typed_value": [{"value": None, "typed_value": "horror"},
                                                           {"value": b"\x00", "typed_value": None}]},
        {"metadata": EMPTY, "value": None, "typed_value": [{"value": None, "typed_value": "comedy"},
                                                           {"value": None, "typed_value": "drama"},
                                                           {"value": None, "typed_value": "romance"}]},
        {"metadata": EMPTY, "value": b"\x00", "typed_value": None},
        {"metadata": EMPTY, "value": encoded("[1, 2]").value, "typed_value": None},
        {"metadata": EMPTY, "value": None, "typed_value": []},
    ], shredded_type(typed)))
    assert decoded(unshred(column)) == [["comedy", "drama"], ["horror", None], ["comedy", "drama", "romance"],
                                        None, [1, 2], []]


def test_objects_nested_in_arrays_nested_in_objects_take_their_names_from_their_row_metadata():
    inner = pa.struct([("value", pa.binary()),
                       ("typed_value", pa.struct([pa.field("n", pa.struct([("value", pa.binary()),
                                                                           ("typed_value", pa.int32())]),
                                                           nullable=False)]))])
    typed = pa.struct([pa.field("items", pa.struct([("value", pa.binary()),
                                                    ("typed_value", pa.list_(pa.field("element", inner,
                                                                                      nullable=False)))]),
                                nullable=False)])
    originals = [{"items": [{"n": 1}, {"n": 2, "label": "x"}, "loose"]}, {"items": []}, {"other": True}]
    rows = []
    for original in originals:
        # names in this row's metadata in an order unlike the sorted one, so ids are not positions
        metadata = encoded(json.dumps({"label": 0, "other": 0, "n": 0, "items": 0})).metadata
        if "items" not in original:
            rows.append({"metadata": metadata, "value": encoded('{"label": 0, "other": true}').value[:0] or None,
                         "typed_value": {"items": {"value": None, "typed_value": None}}})
            continue
        elements = []
        for item in original["items"]:
            if isinstance(item, dict):
                residual = encoded(json.dumps({"label": item["label"]})).value if "label" in item else None
                elements.append({"value": residual, "typed_value": {"n": {"value": None, "typed_value": item["n"]}}})
            else:
                elements.append({"value": encoded(json.dumps(item)).value, "typed_value": None})
        rows.append({"metadata": metadata, "value": None, "typed_value": {"items": {"value": None,
                                                                                   "typed_value": elements}}})
    # the last row's residual {"other": true} against this metadata: "other" is its id 1
    rows[2]["value"] = bytes([0x02, 1, 1, 0, 1, 0x04])
    column = through_parquet(pa.array(rows, shredded_type(typed)))
    assert decoded(unshred(column)) == originals


PRIMITIVES = [
    (pa.bool_(), [True, False], [True, False]),
    (pa.int8(), [-128, 127], [-128, 127]),
    (pa.int16(), [-32768, 32767], [-32768, 32767]),
    (pa.int32(), [-2**31, 2**31 - 1], [-2**31, 2**31 - 1]),
    (pa.int64(), [-2**63, 2**63 - 1], [-2**63, 2**63 - 1]),
    (pa.float32(), [1.5, -0.25], [1.5, -0.25]),
    (pa.float64(), [1e300, -2.5], [1e300, -2.5]),
    (pa.decimal128(9, 2), [decimal.Decimal("1234567.89"), decimal.Decimal("-0.01")],
     [decimal.Decimal("1234567.89"), decimal.Decimal("-0.01")]),
    (pa.decimal128(18, 3), [decimal.Decimal("123456789012345.678")], [decimal.Decimal("123456789012345.678")]),
    (pa.date32(), [datetime.date(2024, 10, 24), datetime.date(1969, 12, 31)],
     [datetime.date(2024, 10, 24), datetime.date(1969, 12, 31)]),
    (pa.timestamp("us"), [datetime.datetime(2024, 10, 24, 12, 30, 1, 5)],
     [datetime.datetime(2024, 10, 24, 12, 30, 1, 5)]),
    (pa.timestamp("us", tz="UTC"), [datetime.datetime(2024, 10, 24, 12, 30, 1, 5, tzinfo=datetime.timezone.utc)],
     [datetime.datetime(2024, 10, 24, 12, 30, 1, 5, tzinfo=datetime.timezone.utc)]),
    (pa.string(), ["short", "x" * 100, ""], ["short", "x" * 100, ""]),
    (pa.binary(), [b"\x00\x01", b""], [b"\x00\x01", b""]),
]


@pytest.mark.parametrize("arrow_type,values,expected", PRIMITIVES, ids=[str(p[0]) for p in PRIMITIVES])
def test_each_shredded_primitive_type_decodes_to_its_value(arrow_type, values, expected):
    rows = [{"metadata": EMPTY, "value": None, "typed_value": v} for v in values]
    result = unshred(through_parquet(pa.array(rows, shredded_type(arrow_type))))
    got = []
    for row in result.to_pylist():
        assert problem(row["metadata"], row["value"]) is None
        got.append(VariantVal(row["value"], row["metadata"]).toPython())
    if pa.types.is_timestamp(arrow_type) and arrow_type.tz is not None:
        got = [g.astimezone(datetime.timezone.utc) for g in got]
    if pa.types.is_floating(arrow_type):
        assert got == pytest.approx(expected)
    else:
        assert got == expected


def test_a_38_digit_decimal_is_encoded_as_pyspark_encodes_it():
    """PySpark's decoder rounds decimals to 28 digits: the expectation is its encoder's bytes instead."""
    text = "12345678901234567890123456789012345678"
    rows = [{"metadata": EMPTY, "value": None, "typed_value": decimal.Decimal(text)}]
    result = unshred(through_parquet(pa.array(rows, shredded_type(pa.decimal128(38, 0)))))
    assert result[0].as_py()["value"] == encoded(text).value


def test_a_shredded_uuid_is_the_variant_uuid_of_its_sixteen_big_endian_bytes():
    """PySpark's decoder has no uuid: the expectation is the encoding's definition (type id 20, the
    UUID's bytes in big-endian order, as Parquet's UUID stores them)."""
    value = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
    rows = [{"metadata": EMPTY, "value": None, "typed_value": value.bytes}]
    result = unshred(through_parquet(pa.array(rows, shredded_type(pa.binary(16)))))
    assert result[0].as_py()["value"] == bytes([20 << 2]) + value.bytes
    assert problem(EMPTY, result[0].as_py()["value"]) is None


def test_a_missing_top_level_value_reads_as_variant_null_and_the_type_is_the_unshredded_one():
    column = pa.array([{"metadata": EMPTY, "value": None, "typed_value": None}], shredded_type(pa.int64()))
    result = unshred(column)
    assert result.type == VARIANT_ARROW_TYPE
    assert result.to_pylist() == [{"metadata": EMPTY, "value": b"\x00"}]


def test_data_against_the_specification_is_refused_with_a_clear_error():
    both = pa.array([{"metadata": EMPTY, "value": b"\x00", "typed_value": 1}], shredded_type(pa.int64()))
    with pytest.raises(InvalidArgumentError, match="both in value and in a non-object typed_value"):
        unshred(both, column_name="m")
    typed = pa.struct([pa.field("a", pa.struct([("value", pa.binary()), ("typed_value", pa.int64())]))])
    unknown_name = pa.array([{"metadata": EMPTY, "value": None, "typed_value": {"a": {"value": None,
                                                                                      "typed_value": 1}}}],
                            shredded_type(typed))
    with pytest.raises(InvalidArgumentError, match="'a' is not in the row's metadata"):
        unshred(unknown_name, column_name="m")


# ----------------------------------------------------------------------------- tables
SHREDDED_TYPE = pa.struct([
    pa.field("metadata", pa.binary(), nullable=False), ("value", pa.binary()),
    ("typed_value", pa.struct([pa.field("a", pa.struct([("value", pa.binary()), ("typed_value", pa.int64())]),
                                        nullable=False)])),
])
DOCUMENTS = ['{"a": 1, "b": "x"}', '{"a": 2}', '"not an object"', '{"a": "text", "c": [1, 2]}', '{"b": null}']


def _shredded_row(document: str) -> dict:
    value = json.loads(document)
    if not isinstance(value, dict):
        return {"metadata": EMPTY, "value": encoded(document).value, "typed_value": None}
    rest = {k: v for k, v in value.items() if k != "a"}
    metadata = encoded(json.dumps({**rest, "a": 0})).metadata
    residual = encoded(json.dumps(rest)).value if rest else None
    a = value.get("a", ...)
    field = ({"value": None, "typed_value": None} if a is ... else
             {"value": None, "typed_value": a} if isinstance(a, int) else
             {"value": encoded(json.dumps(a)).value, "typed_value": None})
    return {"metadata": metadata, "value": residual, "typed_value": {"a": field}}


def shredded_table(root) -> None:
    """A table with ``variantShredding`` whose one data file stores ``v`` (top level) and ``s.v`` (in a
    struct) shredded, as the specification lays them out."""
    log = root / "_delta_log"
    log.mkdir(parents=True)
    rows = pa.table({
        "id": pa.array(range(len(DOCUMENTS)), pa.int64()),
        "v": pa.array([_shredded_row(d) for d in DOCUMENTS], SHREDDED_TYPE),
        "s": pa.array([{"v": {"metadata": EMPTY, "value": None, "typed_value": 10 * i}} for i in range(len(DOCUMENTS))],
                      pa.struct([("v", shredded_type(pa.int64()))])),
    })
    pq.write_table(rows, root / "part-00000.parquet")
    variant = {"type": "struct", "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "v", "type": "variant", "nullable": True, "metadata": {}},
        {"name": "s", "type": {"type": "struct", "fields": [{"name": "v", "type": "variant", "nullable": True,
                                                           "metadata": {}}]}, "nullable": True, "metadata": {}}]}
    features = ["variantType", "variantShredding"]
    actions = [
        {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": features,
                      "writerFeatures": features}},
        {"metaData": {"id": "5d9e1c43-6c1c-4a41-9a57-0c6d1f3e9b21", "format": {"provider": "parquet", "options": {}},
                      "schemaString": json.dumps(variant), "partitionColumns": [],
                      "configuration": {"delta.enableVariantShredding": "true"}, "createdTime": 1}},
        {"add": {"path": "part-00000.parquet", "partitionValues": {},
                 "size": (root / "part-00000.parquet").stat().st_size,
                 "modificationTime": 1, "dataChange": True,
                 "stats": json.dumps({"numRecords": len(DOCUMENTS), "nullCount": {"id": 0, "v": 0, "s": {"v": 0}}})}},
    ]
    (log / "00000000000000000000.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")


def documents_of(rows: pa.Table) -> dict[int, tuple]:
    out = {}
    for row in rows.to_pylist():
        v, s = row["v"], row["s"]["v"]
        out[row["id"]] = (json.loads(VariantVal(v["value"], v["metadata"]).toJson()),
                          json.loads(VariantVal(s["value"], s["metadata"]).toJson()))
    return out


EXPECTED = {i: (json.loads(d), 10 * i) for i, d in enumerate(DOCUMENTS)}


def test_a_table_with_shredded_files_reads_appends_and_deletes_with_unshredded_files(tmp_path):
    from table import Table, write_table
    from tests.support.corpus import to_memory

    shredded_table(tmp_path / "t")
    uri = to_memory(tmp_path / "t")
    table = Table(uri)
    rows = table.to_pyarrow_table()
    assert is_variant(rows.schema.field("v").type) and is_variant(rows.schema.field("s").type.field("v").type)
    assert documents_of(rows) == EXPECTED
    assert documents_of(table.to_pyarrow_reader().read_all()) == EXPECTED
    assert documents_of(table.to_pyarrow_dataset().to_table()) == EXPECTED
    # an append of unshredded values (the rows as read), then a DELETE that rewrites the shredded file
    write_table(uri, rows.slice(0, 2).set_column(0, "id", pa.array([100, 101], pa.int64())))
    Table(uri).delete("id = 1")
    final = Table(uri)
    expected = {i: e for i, e in EXPECTED.items() if i != 1} | {100: EXPECTED[0], 101: EXPECTED[1]}
    assert documents_of(final.to_pyarrow_table()) == expected
    assert "variantShredding" in final.snapshot.protocol.writer_features
    # the DELETE rewrote the shredded file; every file now holds the variants unshredded
    from table.data.files import filesystem_for
    from table.data.fragments import file_path

    paths = [f.path for f in final.snapshot.files]
    assert "part-00000.parquet" not in paths and len(paths) == 2
    fs = filesystem_for(final.uri, final.storage_options)
    for path in paths:
        with fs.open_input_file(file_path(final.uri, path)) as stored:
            assert not needs_reassembly(pq.read_schema(stored), rows.schema)

def test_a_file_system_of_data_files_hands_shredded_files_over_unshredded(tmp_path):
    """What scans that do not fetch files whole read through (table.data.fragments.file_fragments)."""
    import pyarrow.dataset as ds
    import pyarrow.fs as pafs

    from table.data.fragments import parquet_format
    from table.log.schema_arrow import delta_to_arrow

    shredded_table(tmp_path / "t")
    schema_string = json.loads((tmp_path / "t" / "_delta_log" / "00000000000000000000.json").read_text()
                               .splitlines()[1])["metaData"]["schemaString"]
    schema = delta_to_arrow(schema_string)
    fs = reading_files(pafs.LocalFileSystem(), schema)
    fmt = parquet_format()
    path = str(tmp_path / "t" / "part-00000.parquet")
    size = (tmp_path / "t" / "part-00000.parquet").stat().st_size  # the add action's: the stored file's size
    dataset = ds.FileSystemDataset([fmt.make_fragment(path, filesystem=fs, file_size=size)], schema, fmt, fs)
    assert documents_of(dataset.to_table()) == EXPECTED
    assert needs_reassembly(pq.read_schema(path), schema)
    # a file that stores them unshredded is handed over as it is
    plain = str(tmp_path / "plain.parquet")
    pq.write_table(dataset.to_table(), plain)
    assert not needs_reassembly(pq.read_schema(plain), schema)
    again = ds.FileSystemDataset([fmt.make_fragment(plain, filesystem=fs)], schema, fmt, fs)
    assert documents_of(again.to_table()) == EXPECTED


def test_sparks_table_with_variant_shredding_reads_as_its_files_and_takes_appends_and_deletes():
    """delta-rs's ``spark-shredded-variant-preview-delta`` (Spark 4.0 with ``delta.enableVariantShredding``:
    the feature listed, its files unshredded, variants nested in arrays, structs and maps): read as
    pyarrow reads its Parquet files, then appended to and deleted from."""
    from table import Table, write_table
    from tests.support.corpus import DATA, to_memory

    directory = DATA / "delta-rs" / "spark-shredded-variant-preview-delta"
    expected = sorted((row for path in directory.glob("*.parquet") for row in pq.read_table(path).to_pylist()),
                      key=repr)
    uri = to_memory(directory)
    rows = Table(uri).to_pyarrow_table()
    assert "variantShredding-preview" in Table(uri).snapshot.protocol.reader_features
    assert sorted(rows.to_pylist(), key=repr) == expected
    added = rows.slice(0, 2)
    added = added.set_column(0, "id", pa.array([1000, 1001], pa.int64()))
    write_table(uri, added)
    Table(uri).delete("id = 0")
    final = Table(uri).to_pyarrow_table().to_pylist()
    assert sorted(final, key=repr) == sorted([r for r in expected if r["id"] != 0] + added.to_pylist(), key=repr)


# ----------------------------------------------------------------------------- parquet-testing's cases
GOLDEN = Path(__file__).resolve().parents[2] / "data" / "parquet-testing" / "shredded_variant"
GOLDEN_CASES = [c for c in json.loads((GOLDEN / "cases.json").read_text()) if "parquet_file" in c]


def _split(stored: bytes) -> tuple[bytes, bytes]:
    """A ``.variant.bin`` file's metadata and value (stored one after the other)."""
    size = ((stored[0] >> 6) & 0x03) + 1
    count = int.from_bytes(stored[1:1 + size], "little")
    end = 1 + size * (count + 2) + int.from_bytes(stored[1 + size * (count + 1):1 + size * (count + 2)], "little")
    return stored[:end], stored[end:]


def _same_variant(got: dict, metadata: bytes, value: bytes) -> bool:
    """Byte for byte, or (field ids and offset widths may differ) decoding to the same JSON with PySpark."""
    if got["metadata"] == metadata and got["value"] == value:
        return True
    return VariantVal(got["value"], got["metadata"]).toJson() == VariantVal(value, metadata).toJson()


@pytest.mark.parametrize("case", GOLDEN_CASES, ids=lambda c: f"case-{c['case_number']:03d}-{c['test']}")
def test_parquet_testings_shredded_files_read_as_the_variants_they_publish(case):
    """apache/parquet-testing's ``shredded_variant`` cases (generated by Iceberg's variant reader tests):
    each file's ``var`` column reassembles to the published variant of each row, and each file the cases
    call an error is refused."""
    column = pq.read_table(GOLDEN / case["parquet_file"]).column("var")
    if "error_message" in case:
        with pytest.raises(InvalidArgumentError, match="shredded variant column"):
            unshred(column)
        return
    got = unshred(column).to_pylist()
    files = case.get("variant_files") or [case["variant_file"]]
    assert len(got) == len(files)
    for row, name in zip(got, files):
        if name is None:
            assert row is None
            continue
        assert row is not None and problem(row["metadata"], row["value"]) is None
        assert _same_variant(row, *_split((GOLDEN / name).read_bytes())), case["variant"]


def test_variants_nested_in_lists_and_maps_are_reassembled_with_their_null_rows():
    from table.data.shredding import reassembled
    from table.log.schema_arrow import VARIANT_ARROW_TYPE as V

    element = shredded_type(pa.int64())
    stored = pa.table({
        "l": pa.array([[{"metadata": EMPTY, "value": None, "typed_value": 1}], None,
                       [{"metadata": EMPTY, "value": encoded('"x"').value, "typed_value": None}, None]],
                      pa.list_(element)),
        "m": pa.array([[("k", {"metadata": EMPTY, "value": None, "typed_value": 7})], None, []],
                      pa.map_(pa.string(), element)),
    })
    stored = pq.read_table(io.BytesIO(_parquet_bytes(stored))).slice(0)
    schema = pa.schema([("l", pa.list_(V)), ("m", pa.map_(pa.string(), V))])
    got = reassembled(stored, schema)
    assert got.schema.field("l").type.value_type == V
    rows = got.to_pylist()
    as_json = lambda v: None if v is None else json.loads(VariantVal(v["value"], v["metadata"]).toJson())  # noqa: E731
    assert [None if r["l"] is None else [as_json(v) for v in r["l"]] for r in rows] == [[1], None, ["x", None]]
    assert [None if r["m"] is None else {k: as_json(v) for k, v in r["m"]} for r in rows] == [{"k": 7}, None, {}]


def _parquet_bytes(rows: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(rows, sink)
    return sink.getvalue()


def test_optimize_compacts_a_shredded_file_into_an_unshredded_one(tmp_path):
    from table import Table, write_table
    from table.data.files import filesystem_for
    from table.data.fragments import file_path
    from tests.support.corpus import to_memory

    shredded_table(tmp_path / "t")
    uri = to_memory(tmp_path / "t")
    rows = Table(uri).to_pyarrow_table()
    write_table(uri, rows.slice(0, 1).set_column(0, "id", pa.array([100], pa.int64())))
    Table(uri).optimize()
    final = Table(uri)
    assert documents_of(final.to_pyarrow_table()) == EXPECTED | {100: EXPECTED[0]}
    (only,) = final.snapshot.files
    with filesystem_for(final.uri, final.storage_options).open_input_file(file_path(final.uri, only.path)) as stored:
        assert not needs_reassembly(pq.read_schema(stored), rows.schema)
