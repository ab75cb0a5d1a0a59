"""Spark on dynacommit tables.

``register(spark)`` makes ``format("dynacommit")`` available in a session (classic or Spark Connect):
batch writes and reads (time travel by version or timestamp), the Structured Streaming sink and source
(:class:`DynacommitDataSource`, :mod:`spark_integration.datasource`, :mod:`spark_integration.streaming`),
and the change data feed in batch and streams (:mod:`spark_integration.changes`). :func:`write_dataframe` and
:func:`read_dataframe` are the function forms (``write_dataframe`` returns the commit's version and
metrics, and has the ``error`` and ``ignore`` modes). Executors stage their rows as multipart uploads
and the driver commits them as one log entry; all S3 I/O happens in the Python workers through
boto3/pyarrow: no hadoop-aws needed. :class:`DynacommitTable` has delta-spark's ``DeltaTable`` names:
``delete``, ``update`` and ``merge`` run as Spark jobs (:mod:`spark_integration.dml`) and commit once.
"""

from __future__ import annotations

from spark_integration.datasource import DynacommitDataSource, register
from spark_integration.deltatable import DynacommitMergeBuilder, DynacommitTable
from spark_integration.read import read_dataframe
from spark_integration.write import write_dataframe

__all__ = ["DynacommitDataSource", "DynacommitMergeBuilder", "DynacommitTable", "read_dataframe", "register",
           "write_dataframe"]
