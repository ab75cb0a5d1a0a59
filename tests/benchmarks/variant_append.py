"""Wall and CPU time of an append of variant values, and of the encoding check it runs (table.data.variant).

A table of ``id long, v variant`` (reader 3 / writer 7, ``variantType``) in the in-process (``memory://``)
store, so that the figures are the data path's and not a server's. Each row's variant is a distinct JSON
object of five fields (a nested object and an array among them) encoded by PySpark's own encoder
(``VariantUtils.parse_json``), so every value and every metadata dictionary differs from the next.

    PYTHONPATH=. .venv/bin/python tests/benchmarks/variant_append.py [--rows 100000] [--repeats 3]

Prints one JSON line per measure (best of ``--repeats``); asserts nothing (figures go to BENCHMARKS.md by
hand).
"""

from __future__ import annotations

import argparse
import json
import os
import time
import uuid

import pyarrow as pa

import tests.support.memory  # noqa: F401 - registers the in-process memory:// scheme
from logstore import open_log_store
from table import write_table
from table.data import variant
from table.log.actions import Metadata, Protocol, serialize_commit
from table.log.schema_arrow import VARIANT_ARROW_TYPE


def documents(rows: int) -> pa.Table:
    from pyspark.sql.variant_utils import VariantUtils

    values, metadata = [], []
    for i in range(rows):
        document = {"id": i, "name": f"user{i}", f"k{i % 50}": i * 0.5,
                    "tags": ["a", i % 7, None, True], "nested": {"x": i, "y": None, f"z{i % 13}": "s" * (i % 40)}}
        value, meta = VariantUtils.parse_json(json.dumps(document))
        values.append(value)
        metadata.append(meta)
    v = pa.StructArray.from_arrays([pa.array(metadata, pa.binary()), pa.array(values, pa.binary())],
                                   fields=list(VARIANT_ARROW_TYPE))
    return pa.table({"id": pa.array(range(rows), pa.int64()), "v": v})


def new_table() -> str:
    uri = f"memory://bench-{uuid.uuid4().hex[:8]}/variants"
    schema = json.dumps({"type": "struct", "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "v", "type": "variant", "nullable": True, "metadata": {}}]})
    open_log_store(uri).write(0, serialize_commit([
        Protocol(min_reader_version=3, min_writer_version=7, reader_features=["variantType"],
                 writer_features=["variantType"]),
        Metadata(id=str(uuid.uuid4()), schema_string=schema, configuration={}, created_time=1)]))
    return uri


def best(action, repeats: int) -> tuple[float, float]:
    """(best wall seconds, best process CPU seconds) of ``repeats`` calls."""
    walls, cpus = [], []
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        action()
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
    return min(walls), min(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rows = documents(args.rows)
    load = os.getloadavg()[0]
    wall, cpu = best(lambda: variant.check_rows(rows, table="bench"), args.repeats)
    print(json.dumps({"measure": "encoding check", "rows": args.rows, "wall_s": round(wall, 3),
                      "cpu_s": round(cpu, 3), "load1": round(load, 1)}))
    wall, cpu = best(lambda: write_table(new_table(), rows), args.repeats)
    print(json.dumps({"measure": "write_table append", "rows": args.rows, "wall_s": round(wall, 3),
                      "cpu_s": round(cpu, 3), "load1": round(os.getloadavg()[0], 1)}))


if __name__ == "__main__":
    main()
