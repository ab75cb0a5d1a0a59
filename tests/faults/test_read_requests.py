"""Reading small files costs one request each: a GET of the whole object through the log store's client, no
HEAD (counted by the fault proxy in front of moto), and the rows are those deltalake reads from the same
table. Faults on those GETs are retried, not reported."""

from __future__ import annotations

import deltalake
import pyarrow as pa
import pyarrow.compute as pc

from table import Table
from table.data import fetching
from table.data.write import write_table
from tests.support.fault_harness import deltalake_options
from tests.support.fault_proxy import FaultRule

FILES = 5


def small_files_table(uri: str, options: dict[str, str]) -> Table:
    for i in range(FILES):
        rows = pa.table({"id": pa.array(range(i * 10, i * 10 + 10), pa.int64()),
                         "city": pa.array([["Oslo", "Lima", "Paris"][i % 3]] * 10)})
        write_table(uri, rows, storage_options=options)
    return Table(uri, storage_options=options)


def test_n_small_files_are_n_gets_and_no_head(s3_uri, proxied_options, storage_options, fault_proxy):
    table = small_files_table(s3_uri, proxied_options)
    adds = table.add_actions()
    assert len(adds) == FILES and all(a.size <= fetching.WHOLE_FILE for a in adds)
    fault_proxy.reset_counters()
    ours = table.to_pyarrow_table()
    requests = fault_proxy.stats().requests
    assert requests[("s3", "GetObject")] == FILES
    assert requests[("s3", "HeadObject")] == 0
    assert sum(requests.values()) == FILES  # the snapshot was read when the table was opened

    theirs = deltalake.DeltaTable(s3_uri, storage_options=deltalake_options(storage_options)).to_pyarrow_table()
    assert ours.sort_by("id").equals(theirs.select(ours.column_names).sort_by("id"))

    fault_proxy.reset_counters()
    kept = table.to_pyarrow_table(filter=pc.field("id") < 25)  # files ruled out by their stats are not fetched
    assert kept.num_rows == 25 and fault_proxy.stats().requests[("s3", "GetObject")] == 3


def test_faulted_gets_are_fetched_again(s3_uri, proxied_options, fault_proxy):
    table = small_files_table(s3_uri, proxied_options)
    expected = table.to_pyarrow_table().sort_by("id")
    fault_proxy.reset_counters()
    fault_proxy.set_faults([FaultRule(kind, 0.15, service="s3", operation="GetObject")
                            for kind in ("500", "drop_before", "drop_after", "cut")])
    assert table.to_pyarrow_table().sort_by("id").equals(expected)
    assert fault_proxy.stats().total_faults > 0
    assert fault_proxy.stats().requests[("s3", "HeadObject")] == 0


def test_a_spark_read_task_makes_one_get_per_small_file(s3_uri, proxied_options, storage_options, fault_proxy):
    """What a Spark executor runs for its share of the files (spark_integration/read.py), without Spark."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from logstore import StorageOptions
    from spark_integration.read import partitions_of, read_partition

    table = small_files_table(s3_uri, proxied_options)
    snapshot = table.snapshot
    adds = table.add_actions()
    [task] = partitions_of([adds], table_path=table.uri.table_path, version=table.version,
                           table_schema=snapshot.schema, partition_columns=snapshot.partition_columns)
    schema = from_arrow_schema(snapshot.schema)
    fault_proxy.reset_counters()
    ours = pa.Table.from_batches(list(read_partition(task, options=StorageOptions.resolve(proxied_options),
                                                     schema=schema)))
    requests = fault_proxy.stats().requests
    assert requests[("s3", "GetObject")] == FILES and requests[("s3", "HeadObject")] == 0
    theirs = deltalake.DeltaTable(s3_uri, storage_options=deltalake_options(storage_options)).to_pyarrow_table()
    assert ours.sort_by("id").equals(theirs.select(ours.column_names).sort_by("id"))



def test_optimize_reads_each_small_file_with_one_get(s3_uri, proxied_options, storage_options, fault_proxy):
    """What OPTIMIZE runs for each bin, in this process or in a Spark task (``BinWork.rewrite``), compacting
    and Z-ordering: one GET per small file read, no HEAD; the staged rows are the table's."""
    from table.data.files import filesystem_for
    from table.data.uploads import abort_pending
    from table.operations.optimize import BinWork, plan_bins

    table = small_files_table(s3_uri, proxied_options)
    snapshot = table.snapshot
    expected = table.to_pyarrow_table().sort_by("id")
    filesystem = filesystem_for(table.uri, table.storage_options)
    for z_order in ((), ("id",)):
        [bin_] = plan_bins(snapshot, None, 1024 * 1024, z_order)
        assert len(bin_.files) == FILES
        fault_proxy.reset_counters()
        staged = BinWork.of(snapshot, 1024 * 1024, z_order).rewrite(bin_, objects=table.objects, filesystem=filesystem,
                                                                    job_id="0f" * 16, task_id=0)
        requests = fault_proxy.stats().requests
        assert requests[("s3", "GetObject")] == FILES and requests[("s3", "HeadObject")] == 0
        assert sum(f.num_records for f in staged.files) == expected.num_rows
        abort_pending(table.objects, [staged])
    theirs = deltalake.DeltaTable(s3_uri, storage_options=deltalake_options(storage_options)).to_pyarrow_table()
    assert theirs.select(expected.column_names).sort_by("id").equals(expected)
