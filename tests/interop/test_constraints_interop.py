"""Tables with CHECK constraints and generated columns shared with deltalake: one made by deltalake
(``DeltaTable.create`` with a generation expression, ``alter.add_constraint``) is written by us with its
rules enforced, and a constraint we add is enforced by deltalake's writer."""

from __future__ import annotations

import pyarrow as pa
import pytest

from table import ConstraintViolationError, Table, write_table

deltalake = pytest.importorskip("deltalake")
pytestmark = pytest.mark.interop


@pytest.fixture
def deltars_options(storage_options) -> dict[str, str]:
    options = {k: v for k, v in storage_options.items() if k != "DELTA_DYNAMO_TABLE_NAME"}
    options["AWS_S3_ALLOW_UNSAFE_RENAME"] = "true"
    return options


def rows(ids, amounts) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "amount": pa.array(amounts, pa.int64())})


def test_a_deltalake_table_with_a_constraint_and_a_generated_column_is_written_by_us(s3_uri, storage_options,
                                                                                   deltars_options):
    from deltalake.schema import Field, PrimitiveType, Schema

    schema = Schema([Field("id", PrimitiveType("long"), nullable=True),
                     Field("amount", PrimitiveType("long"), nullable=True),
                     Field("double_amount", PrimitiveType("long"), nullable=True,
                           metadata={"delta.generationExpression": "amount * 2"})])
    deltalake.DeltaTable.create(s3_uri, schema=schema, storage_options=deltars_options)
    deltalake.write_deltalake(s3_uri, rows([1], [5]), mode="append", storage_options=deltars_options)
    deltalake.DeltaTable(s3_uri, storage_options=deltars_options).alter.add_constraint({"amount_positive": "amount > 0"})

    write_table(s3_uri, rows([2, 3], [7, 8]), storage_options=storage_options)  # double_amount computed
    with pytest.raises(ConstraintViolationError, match=r"amount_positive \(amount > 0\).*id=4, amount=-1"):
        write_table(s3_uri, rows([4], [-1]), storage_options=storage_options)
    wrong = rows([5], [1]).append_column("double_amount", pa.array([3], pa.int64()))
    with pytest.raises(ConstraintViolationError, match="generated column double_amount"):
        write_table(s3_uri, wrong, storage_options=storage_options)
    Table(s3_uri, storage_options=storage_options).update({"amount": "amount + 1"}, predicate="id = 1")

    theirs = deltalake.DeltaTable(s3_uri, storage_options=deltars_options)
    assert sorted(theirs.to_pyarrow_table().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "amount": 6, "double_amount": 12}, {"id": 2, "amount": 7, "double_amount": 14},
        {"id": 3, "amount": 8, "double_amount": 16}]
    deltalake.write_deltalake(s3_uri, rows([6], [1]), mode="append", storage_options=deltars_options)
    assert Table(s3_uri, storage_options=storage_options).to_pyarrow_table().num_rows == 4


def test_a_constraint_we_add_is_enforced_by_deltalake(s3_uri, storage_options, deltars_options):
    write_table(s3_uri, rows([1, 2], [10, 20]), storage_options=storage_options)
    Table(s3_uri, storage_options=storage_options).alter.add_constraint({"amount_positive": "amount > 0"})
    theirs = deltalake.DeltaTable(s3_uri, storage_options=deltars_options)
    assert theirs.metadata().configuration == {"delta.constraints.amount_positive": "amount > 0"}
    with pytest.raises(Exception, match="(?i)invalid data|check constraint|amount_positive"):
        deltalake.write_deltalake(s3_uri, rows([3], [-1]), mode="append", storage_options=deltars_options)
    deltalake.write_deltalake(s3_uri, rows([3], [1]), mode="append", storage_options=deltars_options)
    Table(s3_uri, storage_options=storage_options).alter.drop_constraint("amount_positive")
    deltalake.write_deltalake(s3_uri, rows([4], [-1]), mode="append", storage_options=deltars_options)
    assert sorted(Table(s3_uri, storage_options=storage_options).to_pyarrow_table().column("id").to_pylist()) == [
        1, 2, 3, 4]
