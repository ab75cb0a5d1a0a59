"""Table features the Python tests cover, through Spark (issue 25): IcebergCompatV1 / V2 tables appended to
and merged into by Spark's tasks (partition values materialized in the files, nested field ids as Spark
writes them), and variant tables read, appended to and merged into from Spark. The expectation is
independent of the Spark path: deltalake reading the table on S3, the rows computed by hand, and Delta's
own golden tables (``tests/data``)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from logstore import TableUri, open_object_store
from logstore.errors import InvalidArgumentError
from spark_integration import DynacommitTable, read_dataframe, register, write_dataframe
from table import Table, write_table
from tests.support.corpus import DATA, canonical
from tests.support.fault_harness import deltalake_options

pytestmark = [pytest.mark.spark, pytest.mark.slow]

VARIANT_TABLE = DATA / "delta-rs" / "spark-variant-checkpoint"
ICEBERG_V2_TABLE = DATA / "delta" / "table-with-icebegCompatV2Enabled"


@pytest.fixture(scope="module", autouse=True)
def registered(spark):
    register(spark)


def upload(root: Path, uri: str, options: dict[str, str]) -> None:
    """Every file of the table at ``root`` (its log included) to ``uri`` on S3."""
    table_uri = TableUri.parse(uri)
    store = open_object_store(table_uri, storage_options=options)
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        store.put(table_uri.key(path.relative_to(root).as_posix()), path.read_bytes())


def theirs(uri: str, options: dict[str, str]) -> pa.Table:
    """The rows deltalake's SQL reader reads (column mapping included) from the table on S3."""
    table = deltalake.DeltaTable(uri, storage_options=deltalake_options(options))
    return pa.table(deltalake.QueryBuilder().register("t", table).execute("select * from t").read_all())


def parquet_of(table: Table, path: str) -> pq.ParquetFile:
    return pq.ParquetFile(io.BytesIO(table.objects.get(table.uri.key(path))))


def new_paths(before: Table, after: Table) -> list[str]:
    old = {f.path for f in before.snapshot.files}
    return [f.path for f in after.snapshot.files if f.path not in old]


# --- IcebergCompatV1 / V2 --------------------------------------------------------------------------------

@pytest.mark.parametrize("version", [1, 2])
def test_spark_appends_and_merges_into_an_iceberg_compat_table_as_its_rules_say(spark, s3_uri, storage_options,
                                                                               version):
    """Spark's tasks write each file with the partition values materialized after the data columns, as
    IcebergCompat asks; deltalake reads what the Python plan would have written."""
    configuration = {f"delta.enableIcebergCompatV{version}": "true", "delta.columnMapping.mode": "name"}
    write_table(s3_uri, pa.table({"id": pa.array([1, 2], pa.int64()), "day": ["a", "b"]}), partition_by=["day"],
                storage_options=storage_options, configuration=configuration)
    frame = spark.createDataFrame([(3, "a"), (4, "c")], "id long, day string").repartition(2)
    frame.write.format("dynacommit").mode("append").options(**storage_options).save(s3_uri)
    source = spark.createDataFrame([(2, "b"), (5, "c")], "id long, day string")
    DynacommitTable.forPath(spark, s3_uri, storage_options=storage_options).alias("t") \
        .merge(source.alias("s"), "t.id = s.id").whenMatchedUpdate(set={"day": "'a'"}) \
        .whenNotMatchedInsertAll().execute()
    table = Table(s3_uri, storage_options=storage_options)
    assert f"icebergCompatV{version}" in table.protocol().writer_features
    physical = {f["name"]: f["metadata"]["delta.columnMapping.physicalName"]
                for f in json.loads(table.metadata().schema_string)["fields"]}
    for add in table.snapshot.files:
        content = parquet_of(table, add.path).read()
        assert content.column_names == [physical["id"], physical["day"]]  # the partition column last
        assert set(content.column(physical["day"]).to_pylist()) == {add.partition_values[physical["day"]]}
        assert json.loads(add.stats)["numRecords"] == content.num_rows
    expected = [{"id": 1, "day": "a"}, {"id": 2, "day": "a"}, {"id": 3, "day": "a"}, {"id": 4, "day": "c"},
                {"id": 5, "day": "c"}]
    assert canonical(theirs(s3_uri, storage_options)) == canonical(pa.Table.from_pylist(expected))
    assert canonical(table.to_pyarrow_table()) == canonical(pa.Table.from_pylist(expected))


def test_a_spark_append_to_sparks_iceberg_compat_v2_table_keeps_its_nested_field_ids(spark, s3_uri,
                                                                                    storage_options):
    """Delta's golden table (arrays, maps and structs with nested ids): the rows Spark reads from it,
    appended by Spark's tasks, land in files whose Parquet field ids are the ones delta-spark wrote."""
    upload(ICEBERG_V2_TABLE, s3_uri, storage_options)
    before = Table(s3_uri, storage_options=storage_options)
    rows = before.to_pyarrow_table()
    write_dataframe(read_dataframe(spark, s3_uri, storage_options=storage_options).limit(2), s3_uri,
                    storage_options=storage_options)
    after = Table(s3_uri, storage_options=storage_options)
    (added,) = new_paths(before, after)
    spark_file = pq.ParquetFile(ICEBERG_V2_TABLE / before.snapshot.files[0].path)
    assert field_ids(parquet_of(after, added).schema_arrow) == field_ids(spark_file.schema_arrow)
    got = theirs(s3_uri, storage_options)
    assert got.num_rows == rows.num_rows + 2
    assert all(row in canonical(rows) for row in canonical(got))


def field_ids(schema: pa.Schema) -> list[tuple[str, str]]:
    """Every field of a file's schema, nested ones included, with its Parquet field id."""
    found = []

    def walk(field: pa.Field, path: str) -> None:
        found.append((path, (field.metadata or {}).get(b"PARQUET:field_id", b"").decode()))
        t = field.type
        children = list(t) if pa.types.is_struct(t) else [t.key_field, t.item_field] if pa.types.is_map(t) \
            else [t.value_field] if pa.types.is_list(t) else []
        for child in children:
            walk(child, f"{path}.{child.name}")

    for top in schema:
        walk(top, top.name)
    return found


# --- variant ---------------------------------------------------------------------------------------------

def test_spark_reads_a_variant_table_as_deltalake_does(spark, s3_uri, storage_options):
    """Spark's variant table (variants at the top level and in arrays, structs and maps): each variant
    reads on Spark as its unshredded struct of metadata and value binaries (its fields nullable, as a null
    variant in an array or map holds nulls there), the bytes deltalake reads."""
    upload(VARIANT_TABLE, s3_uri, storage_options)
    expected = sorted((plain(r) for r in theirs(s3_uri, storage_options).to_pylist(maps_as_pydicts="strict")),
                      key=repr)
    frame = read_dataframe(spark, s3_uri, storage_options=storage_options)
    assert frame.schema["v"].dataType.simpleString() == "struct<metadata:binary,value:binary>"
    assert sorted((plain(r) for r in frame.collect()), key=repr) == expected
    assert canonical(frame.toArrow()) == canonical(theirs(s3_uri, storage_options))
    loaded = spark.read.format("dynacommit").options(**storage_options).load(s3_uri)
    assert sorted((plain(r) for r in loaded.collect()), key=repr) == expected


def plain(value):
    """A Spark Row or a pyarrow row as plain Python values (bytes for binaries, dicts for structs and maps)."""
    from pyspark.sql import Row

    if isinstance(value, Row):
        value = value.asDict()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return bytes(value) if isinstance(value, bytearray) else value


def test_spark_appends_and_merges_variants_into_a_variant_table(spark, s3_uri, storage_options):
    """Values Spark's ``parse_json`` builds (a VariantType column) and the struct form Spark reads are
    both appended by Spark's tasks; the struct form merges in by DynacommitTable, and a VariantType source
    of a MERGE is refused before any job with what works instead (Spark casts a variant to a struct by its
    content). deltalake reads the documents back."""
    from pyspark.sql import functions as F
    from pyspark.sql.variant_utils import VariantUtils

    upload(VARIANT_TABLE, s3_uri, storage_options)
    before = theirs(s3_uri, storage_options)
    documents = {100: {"a": 1, "b": [1, 2.5, "x", None]}, 101: "a string", 102: [True, {"c": None}]}
    parsed = spark.createDataFrame([(i, json.dumps(d)) for i, d in documents.items()], "id long, j string") \
        .select("id", F.parse_json("j").alias("v")).repartition(2)
    write_dataframe(parsed, s3_uri, storage_options=storage_options)
    copied = read_dataframe(spark, s3_uri, storage_options=storage_options).where("id = 2") \
        .selectExpr("id + 198 AS id", "v", "struct_of_variants")
    copied.write.format("dynacommit").mode("append").options(**storage_options).save(s3_uri)
    dt = DynacommitTable.forPath(spark, s3_uri, storage_options=storage_options)
    parsed_source = spark.createDataFrame([(100, "7")], "id long, j string").select("id", F.parse_json("j").alias("v"))
    with pytest.raises(InvalidArgumentError, match=r"MERGE source has VariantType column\(s\) 'v'.*nothing was "
                                                   r"written.*write_dataframe"):
        dt.alias("t").merge(parsed_source.alias("s"), "t.id = s.id").whenMatchedUpdate(set={"v": "s.v"}).execute()
    # the struct form a variant column reads as merges: 100 takes 101's value, 103 is inserted with 102's
    table_rows = read_dataframe(spark, s3_uri, storage_options=storage_options)
    source = table_rows.where("id = 101").selectExpr("100L AS id", "v") \
        .unionByName(table_rows.where("id = 102").selectExpr("103L AS id", "v"))
    dt.alias("t").merge(source.alias("s"), "t.id = s.id").whenMatchedUpdate(set={"v": "s.v"}) \
        .whenNotMatchedInsert(values={"id": "s.id", "v": "s.v"}).execute()
    after = theirs(s3_uri, storage_options)
    assert after.num_rows == before.num_rows + 5
    got = {r["id"]: r for r in after.to_pylist()}
    documents.update({100: documents[101], 103: documents[102]})
    for i, document in documents.items():
        v = got[i]["v"]
        assert json.loads(VariantUtils.to_json(v["value"], v["metadata"])) == document
        assert got[i]["struct_of_variants"] is None
    original = {r["id"]: r for r in before.to_pylist()}
    assert got[200]["v"] == original[2]["v"] and got[200]["struct_of_variants"] == original[2]["struct_of_variants"]
