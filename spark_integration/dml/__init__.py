"""Row-level changes on Spark: DELETE, UPDATE and MERGE distributed over a cluster.

One module per operation (:mod:`~spark_integration.dml.delete`, :mod:`~spark_integration.dml.update`,
:mod:`~spark_integration.dml.merge`), each a ``stage(snapshot, job_id)`` function run by the commit loop
of the Python operations (:func:`table.operations.rewrite.execute`); what they share is in
:mod:`~spark_integration.dml.job` (the driver: candidates, the target's rows, the rewrite job),
:mod:`~spark_integration.dml.tasks` (the executors: reading rows with their file and row number,
rewriting whole files through the staging writer) and :mod:`~spark_integration.dml.pruning` (which
files a Spark SQL condition may touch). :class:`spark_integration.DynacommitTable` is the facade.
"""
