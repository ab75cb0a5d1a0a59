"""Liquid clustering (PROTOCOL.md, "Clustered Table"): tables created with ``cluster_by``, the clustering
changed with ``t.alter.cluster_by``, and OPTIMIZE that clusters the files not yet clustered by the clustering
columns, tagging them ``clusteringProvider``; tables another implementation clustered keep their domains
and their clustered files.

Expectations computed another way: with one clustering column, Z-order is a plain sort, so a clustered
file's rows must come in ``sorted()`` order; deltalake reads the tables we cluster.
"""

from __future__ import annotations

import io
import json
import random
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from logstore import open_log_store
from table import InvalidArgumentError, Table, write_table
from table.log.actions import AddFile, DomainMetadata, Metadata, Protocol
from table.log.commit import Commit, ReadScope
from table.log.schema import schema_string
from table.log.snapshot import read_commit
from table.log.transaction import commit


def rows(start: int, count: int, seed: int = 0) -> pa.Table:
    shuffle = random.Random(seed)
    return pa.table({"id": pa.array(range(start, start + count), pa.int64()),
                     "x": pa.array([shuffle.randint(-1000, 1000) for _ in range(count)], pa.int64()),
                     "name": [f"n{i}" for i in range(count)]})


def _domain(table: Table) -> dict:
    return json.loads(table.snapshot.state.domain_metadata["delta.clustering"].configuration)


def _file_rows(table: Table, add: AddFile) -> pa.Table:
    return pq.read_table(io.BytesIO(table.objects.get(table.uri.key(add.path))))


def _all(table: Table) -> list:
    return sorted(table.to_pyarrow_table().to_pylist(), key=lambda r: r["id"])


def test_a_table_created_with_cluster_by_is_a_clustered_table_as_delta_defines_it(memory_uri):
    write_table(memory_uri, rows(0, 10), cluster_by=["x", "id"])
    table = Table(memory_uri)
    protocol = table.protocol()
    assert protocol.min_writer_version == 7 and {"clustering", "domainMetadata"} <= set(protocol.writer_features)
    assert _domain(table) == {"clusteringColumns": [["x"], ["id"]], "domainName": "delta.clustering"}
    assert table.detail()["clusteringColumns"] == ["x", "id"]
    assert table.history(1)[0].operation_parameters["clusterBy"] == '["x", "id"]'
    write_table(memory_uri, rows(10, 5), cluster_by=["x", "id"])  # the same clustering: an ordinary append
    assert Table(memory_uri).version == 1


@pytest.mark.parametrize("kwargs, complaint", [
    (dict(cluster_by=["x"], partition_by=["name"]), "both partitioned and clustered"),
    (dict(cluster_by=["nope"]), "not a column"),
    (dict(cluster_by="x"), "list of column names"),
    (dict(cluster_by=["x", "X"]), "twice"),
    (dict(cluster_by=["name"], configuration={"delta.dataSkippingNumIndexedCols": "2"}), "statistics"),
])
def test_clusterings_delta_refuses_are_refused_before_anything_is_written(memory_uri, kwargs, complaint):
    with pytest.raises((InvalidArgumentError, TypeError), match=complaint):
        write_table(memory_uri, rows(0, 3), **kwargs)
    assert not Table.is_deltatable(memory_uri)


def test_a_write_naming_another_clustering_is_refused_with_the_way_to_change_it(memory_uri):
    write_table(memory_uri, rows(0, 3), cluster_by=["x"])
    with pytest.raises(InvalidArgumentError, match=r"clustered by \['x'\], not by \['id'\].*t.alter.cluster_by\(\['id'\]\)"):
        write_table(memory_uri, rows(3, 3), cluster_by=["id"])
    other = f"memory://mem-{uuid.uuid4().hex[:8]}/plain"
    write_table(other, rows(0, 3))
    with pytest.raises(InvalidArgumentError, match="is not clustered"):
        write_table(other, rows(3, 3), cluster_by=["x"])


def test_optimize_clusters_the_unclustered_files_once_and_then_only_new_ones(memory_uri):
    write_table(memory_uri, rows(0, 50, seed=1), cluster_by=["x"])
    for start in (50, 100, 150):
        write_table(memory_uri, rows(start, 50, seed=start))
    before = _all(Table(memory_uri))
    report = Table(memory_uri).optimize()
    assert report.files_removed == 4
    table = Table(memory_uri)
    (clustered,) = table.snapshot.files
    assert clustered.clustering_provider == "liquid" and not clustered.data_change
    values = _file_rows(table, clustered)["x"].to_pylist()
    assert values == sorted(values)  # one clustering column: Z-order is its order
    assert _all(table) == before
    assert json.loads(table.history(1)[0].operation_parameters["clusterBy"]) == ["x"]
    assert Table(memory_uri).optimize().files_removed == 0  # nothing left to cluster: no commit
    assert Table(memory_uri).version == table.version
    write_table(memory_uri, rows(200, 20, seed=7))
    Table(memory_uri).optimize()
    after = Table(memory_uri)
    assert clustered.path in {a.path for a in after.snapshot.files}  # the clustered file is not rewritten again
    assert all(a.clustering_provider == "liquid" for a in after.snapshot.files) and len(after.snapshot.files) == 2
    assert len(_all(after)) == 220


def test_changing_the_clustering_then_a_full_optimize_reclusters_our_files_by_the_new_columns(memory_uri):
    write_table(memory_uri, rows(0, 40, seed=3), cluster_by=["x"])
    Table(memory_uri).optimize()
    result = Table(memory_uri).alter.cluster_by(["name"])
    table = Table(memory_uri)
    assert _domain(table)["clusteringColumns"] == [["name"]]
    entry = table.history(1)[0]
    assert (entry.operation, entry.operation_parameters) == (
        "CLUSTER BY", {"oldClusteringColumns": "x", "newClusteringColumns": "name"})
    assert result.version == table.version
    assert Table(memory_uri).optimize().files_removed == 0  # incremental: clustered files stay
    Table(memory_uri).optimize(full=True)
    table = Table(memory_uri)
    (only,) = table.snapshot.files
    names = _file_rows(table, only)["name"].to_pylist()
    assert names == sorted(names) and len(names) == 40


def test_cluster_by_none_stops_clustering_and_optimize_compacts_again(memory_uri):
    write_table(memory_uri, rows(0, 5), cluster_by=["x"])
    Table(memory_uri).alter.cluster_by(None)
    table = Table(memory_uri)
    assert _domain(table)["clusteringColumns"] == [] and table.detail()["clusteringColumns"] == []
    write_table(memory_uri, rows(5, 5))
    Table(memory_uri).optimize()
    assert all(a.clustering_provider is None for a in Table(memory_uri).snapshot.files)


def test_an_unclustered_table_becomes_clustered_but_a_partitioned_one_cannot(memory_uri):
    write_table(memory_uri, rows(0, 5))
    Table(memory_uri).alter.cluster_by(["x"])
    table = Table(memory_uri)
    assert {"clustering", "domainMetadata"} <= set(table.protocol().writer_features)
    Table(memory_uri).optimize()
    assert [a.clustering_provider for a in Table(memory_uri).snapshot.files] == ["liquid"]
    other = f"memory://mem-{uuid.uuid4().hex[:8]}/p"
    write_table(other, rows(0, 5), partition_by=["name"])
    with pytest.raises(InvalidArgumentError, match="both partitioned and clustered"):
        Table(other).alter.cluster_by(["x"])


def test_z_order_on_a_clustered_table_is_refused_as_delta_refuses_it(memory_uri):
    write_table(memory_uri, rows(0, 5), cluster_by=["x"])
    with pytest.raises(InvalidArgumentError, match="clustered by"):
        Table(memory_uri).optimize(z_order=["id"])


def test_a_table_clustered_elsewhere_keeps_its_domains_and_its_clustered_files(memory_uri):
    """A Databricks-clustered table, as delta-rs's ``table-with-domain-metadata`` shows one: the clustering
    domain with ``domainName``, Databricks' own ``com.databricks.liquid`` domain, and a file its clustering
    tagged ``liquid_ai``. Our appends and our OPTIMIZE keep both domains as they are, and cluster only our
    new files: another implementation's clustered files are left to it (PROTOCOL.md), even with ``full``."""
    store = open_log_store(memory_uri)
    theirs = {"clusteringColumns": [["x"]], "domainName": "delta.clustering"}
    liquid = '{"version":2,"metadataId":"m","revisionId":"r","domainName":"com.databricks.liquid"}'
    sink = io.BytesIO()
    data = rows(0, 10)
    pq.write_table(data, sink)
    stats = json.dumps({"numRecords": 10, "minValues": {"id": 0, "x": min(data["x"].to_pylist()), "name": "n0"},
                        "maxValues": {"id": 9, "x": max(data["x"].to_pylist()), "name": "n9"},
                        "nullCount": {"id": 0, "x": 0, "name": 0}})
    store.objects.put(store.uri.key("theirs.parquet"), sink.getvalue())
    commit(store, None, Commit(actions=(
        Protocol(min_reader_version=1, min_writer_version=7,
                 writer_features=["appendOnly", "clustering", "domainMetadata", "invariants"]),
        Metadata(id="db", schema_string=schema_string(data.schema), created_time=1),
        DomainMetadata(domain="delta.clustering", configuration=json.dumps(theirs), removed=False),
        DomainMetadata(domain="com.databricks.liquid", configuration=liquid, removed=False),
        AddFile(path="theirs.parquet", partition_values={}, size=len(sink.getvalue()), modification_time=1,
                data_change=True, stats=stats, clustering_provider="liquid_ai")),
        operation="CREATE TABLE", read_scope=ReadScope.blind_append()))
    write_table(memory_uri, rows(10, 10, seed=5))
    Table(memory_uri).optimize(full=True)
    table = Table(memory_uri)
    providers = {a.path: a.clustering_provider for a in table.snapshot.files}
    assert providers["theirs.parquet"] == "liquid_ai" and sorted(providers.values()) == ["liquid", "liquid_ai"]
    assert _domain(table) == theirs
    assert table.snapshot.state.domain_metadata["com.databricks.liquid"].configuration == liquid
    assert sorted(r["id"] for r in _all(table)) == list(range(20))
    ours = [a for a in read_commit(store, table.version) if isinstance(a, AddFile)]
    assert [a.clustering_provider for a in ours] == ["liquid"]


@pytest.mark.interop
def test_deltalake_reads_a_table_we_clustered(memory_uri, tmp_path):
    from tests.support.corpus import canonical, deltalake_rows, to_directory

    write_table(memory_uri, rows(0, 30, seed=11), cluster_by=["x", "name"])
    write_table(memory_uri, rows(30, 30, seed=12))
    Table(memory_uri).optimize()
    directory = to_directory(Table(memory_uri), tmp_path / "t")
    assert canonical(deltalake_rows(directory)) == canonical(Table(memory_uri).to_pyarrow_table())


def test_an_append_racing_a_clustering_optimize_lands_unclustered_and_both_commit(memory_uri):
    from tests.support.tables import with_rival

    write_table(memory_uri, rows(0, 10), cluster_by=["x"])
    write_table(memory_uri, rows(10, 10, seed=2))
    report = with_rival(lambda: write_table(memory_uri, rows(20, 5, seed=3)), lambda: Table(memory_uri).optimize())
    table = Table(memory_uri)
    assert report.result.metrics["numReplans"] == "0"  # it read only the files it rewrote: no conflict
    assert sorted(a.clustering_provider or "" for a in table.snapshot.files) == ["", "liquid"]
    assert [r["id"] for r in _all(table)] == list(range(25))


def test_the_cli_clusters_a_clustered_table_and_full_reclusters_by_new_columns(memory_uri, capsys):
    from table.cli import main

    write_table(memory_uri, rows(0, 20, seed=4), cluster_by=["x"])
    write_table(memory_uri, rows(20, 20, seed=5))
    assert main(["optimize", memory_uri, "--execute", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["filesRemoved"] == 2 and report["zOrderBy"] == ["x"]
    Table(memory_uri).alter.cluster_by(["id"])
    assert main(["optimize", memory_uri, "--execute", "--full", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["filesRemoved"] == 1
    table = Table(memory_uri)
    (only,) = table.snapshot.files
    assert _file_rows(table, only)["id"].to_pylist() == list(range(40))
