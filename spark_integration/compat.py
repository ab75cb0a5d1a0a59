"""What the installed pyspark offers a Python data source, found once, by import, in one place.

dynacommit runs on pyspark 4.0 and newer. Newer releases add to the Python data source API; where the
installed one lacks a piece, the data source does without it and says so once (:func:`log_degradations`),
never failing:

- **filter pushdown** (``pyspark.sql.datasource.Filter``, ``DataSourceReader.pushFilters``; Spark 4.1):
  without it a read of ``format("dynacommit")`` opens every file of the version read and Spark filters
  the rows;
- **streaming admission control** (``pyspark.sql.streaming.datasource``: ``ReadLimit``,
  ``SupportsTriggerAvailableNow``; Spark 4.2): without it Spark asks the source for the newest offset
  only, so ``maxFilesPerTrigger`` is not honoured (each micro-batch reads every new commit) and
  ``Trigger.AvailableNow`` runs as Spark runs it for any source (one batch up to the offset found at
  the start);
- **the Arrow stream writer** (``DataSourceStreamArrowWriter``; Spark 4.1): Spark 4.0 hands Arrow batches
  to any streaming writer that is also a ``DataSourceArrowWriter``, so there the sink is both: nothing
  is lost;
- **``to_arrow_schema(..., timezone=)``** (after 4.1; before it ``timestamp_utc=True``): the same Arrow
  schema either way, through :func:`to_arrow_schema` here.

Stand-ins for the absent classes keep the modules above free of version checks: Spark never passes them.
"""

from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass

import pyarrow as pa
import pyspark
from pyspark.sql import datasource as _datasource
from pyspark.sql.pandas import types as _pandas_types
from pyspark.sql.types import StructType

__all__ = ["FEATURES", "PYSPARK_VERSION", "ReadAllAvailable", "ReadLimit", "ReadMaxFiles", "SparkFeatures",
           "StreamArrowWriter", "SupportsTriggerAvailableNow", "log_degradations", "to_arrow_schema"]

log = logging.getLogger(__name__)

PYSPARK_VERSION: str = pyspark.__version__


@dataclass(frozen=True)
class SparkFeatures:
    """Which optional parts of the Python data source API the installed pyspark has."""

    version: str
    filter_pushdown: bool
    stream_admission_control: bool
    stream_arrow_writer: bool

    def degradations(self) -> list[str]:
        """One sentence for each missing feature: what dynacommit does without it."""
        lost = []
        if not self.filter_pushdown:
            lost.append("no filter pushdown for Python data sources (Spark 4.1+): a read of format('dynacommit') "
                        "opens every file of the version read and Spark filters the rows")
        if not self.stream_admission_control:
            lost.append("no admission control for Python streaming sources (Spark 4.2+): maxFilesPerTrigger is "
                        "not honoured, each micro-batch of a format('dynacommit') stream reads every new commit")
        return lost


try:
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxFiles,
        SupportsTriggerAvailableNow,
    )

    _ADMISSION_CONTROL = True
except ImportError:  # pyspark < 4.2
    _ADMISSION_CONTROL = False

    class ReadLimit:  # type: ignore[no-redef]
        """Stand-in: this pyspark never passes a read limit to a source."""

    class ReadAllAvailable(ReadLimit):  # type: ignore[no-redef]
        """Stand-in (see :class:`ReadLimit`)."""

    @dataclass
    class ReadMaxFiles(ReadLimit):  # type: ignore[no-redef]
        """Stand-in (see :class:`ReadLimit`)."""

        max_files: int

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in: this pyspark never calls ``prepareForTriggerAvailableNow``."""


if hasattr(_datasource, "DataSourceStreamArrowWriter"):
    StreamArrowWriter = _datasource.DataSourceStreamArrowWriter
else:  # pyspark 4.0: its sink hands Arrow batches to a streaming writer that is a DataSourceArrowWriter

    class StreamArrowWriter(_datasource.DataSourceStreamWriter, _datasource.DataSourceArrowWriter):  # type: ignore[no-redef]
        """A streaming writer that takes Arrow record batches."""


_UTC = ({"timezone": "UTC"} if "timezone" in inspect.signature(_pandas_types.to_arrow_schema).parameters
        else {"timestamp_utc": True})


def to_arrow_schema(schema: StructType) -> pa.Schema:
    """pyspark's Arrow schema of ``schema``: timestamps as UTC instants (``TimestampNTZType`` without a
    zone), strings and binaries not large."""
    return _pandas_types.to_arrow_schema(schema, prefers_large_types=False, **_UTC)


FEATURES = SparkFeatures(version=PYSPARK_VERSION, filter_pushdown=hasattr(_datasource, "Filter"),
                         stream_admission_control=_ADMISSION_CONTROL,
                         stream_arrow_writer=hasattr(_datasource, "DataSourceStreamArrowWriter"))
"""The installed pyspark's features."""

_logged = False


def log_degradations() -> None:
    """Log, once per process, what the installed pyspark lacks and what dynacommit does instead."""
    global _logged
    if _logged:
        return
    _logged = True
    for sentence in FEATURES.degradations():
        log.warning("pyspark %s: %s", PYSPARK_VERSION, sentence)
