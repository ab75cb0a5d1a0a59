"""The corpus of tables other Delta implementations wrote (``tests/data``, see its README): unpacking them,
putting them where a ``Table`` reads them, and comparing rows without caring for row order or encodings.

Tables come as directories copied from their repository, or as the ``.tar.zst`` archives delta-kernel-rs
ships (unpacked here with pyarrow's zstd codec and ``tarfile``: nothing is fetched). A table is put in a
fresh in-memory bucket, byte for byte, so that the real log store and reader read it as they read S3.
"""

from __future__ import annotations

import datetime as dt
import math
import tarfile
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tests.support.memory import memory_bucket

DATA = Path(__file__).resolve().parents[1] / "data"


def unpack(archive: Path, into: Path) -> Path:
    """Unpack a ``.tar.zst`` archive under ``into`` (once per archive) and return the directory it made."""
    target = into / archive.name.removesuffix(".tar.zst")
    if not target.exists():
        target.mkdir(parents=True)
        with pa.OSFile(str(archive)) as raw, pa.CompressedInputStream(raw, "zstd") as stream:
            with tarfile.open(fileobj=stream, mode="r|") as tar:
                tar.extractall(target, filter="data")
    return target


def to_memory(root: Path) -> str:
    """Copy the table at ``root`` (every file, hidden ones included) to a fresh in-memory bucket; its URI."""
    bucket = f"corpus-{uuid.uuid4().hex[:10]}"
    objects = memory_bucket(bucket)
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        objects.put(f"t/{path.relative_to(root).as_posix()}", path.read_bytes())
    return f"memory://{bucket}/t"


def to_directory(table, into: Path) -> Path:
    """Copy every object of ``table`` (a :class:`table.Table`) to the directory ``into``, for readers of local
    files (deltalake)."""
    for info in table.objects.list(table.uri.key("")):
        target = into / table.uri.relative(info.key)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(table.objects.get(info.key))
    return into


def read_expected(directory: Path) -> pa.Table:
    """The rows of every Parquet file of a golden table's ``expected/`` directory (as DAT and delta-kernel-rs
    read them)."""
    tables = [pq.read_table(p) for p in sorted(directory.glob("*.parquet"))]
    return pa.concat_tables(tables, promote_options="permissive") if tables else pa.table({})


def deltalake_rows(directory: Path, version: int | None = None) -> pa.Table:
    """The rows deltalake's SQL reader (delta-rs on DataFusion: deletion vectors, V2 checkpoints and column
    mapping included) reads from the table at ``directory``."""
    from deltalake import DeltaTable, QueryBuilder

    table = DeltaTable(str(directory), version=version)
    return pa.table(QueryBuilder().register("t", table).execute("select * from t").read_all())


def canonical(table: pa.Table) -> list[Any]:
    """The rows of ``table`` as comparable values, sorted: order of rows, of map entries and of struct
    fields does not matter, nor do Arrow encodings (string views, timestamp units, zone spelling)."""
    rows = [_norm(row) for row in table.to_pylist()]
    return sorted(rows, key=repr)


def _norm(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _norm(v)) for k, v in value.items()))
    if isinstance(value, list):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):  # map entries
            return ("map", tuple(sorted(((_norm(k), _norm(v)) for k, v in value), key=repr)))
        return [_norm(v) for v in value]
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, Decimal):
        return value.normalize() if value else Decimal(0)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    return value
