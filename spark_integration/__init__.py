"""Spark on dynacommit tables: executors stage a DataFrame's files as multipart uploads and the driver
commits them as one log entry (:func:`write_dataframe`); :func:`read_dataframe` reads a table's snapshot
into a DataFrame. All S3 I/O happens in the Python workers through boto3/pyarrow: no hadoop-aws needed.
"""

from __future__ import annotations

from spark_integration.read import read_dataframe
from spark_integration.write import write_dataframe

__all__ = ["read_dataframe", "write_dataframe"]
