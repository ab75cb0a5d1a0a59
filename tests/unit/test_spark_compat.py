"""The compat module reports the installed pyspark's features as its release notes date them: filter pushdown
for Python data sources from 4.1, the Arrow stream writer from 4.1, streaming admission control from 4.2. The
expectation comes from ``pyspark.__version__``; the module finds the features by import."""

from __future__ import annotations

import logging
import re

import pytest

pyspark = pytest.importorskip("pyspark")

pytestmark = [pytest.mark.spark_smoke]


def release() -> tuple[int, int]:
    found = re.match(r"(\d+)\.(\d+)", pyspark.__version__)
    assert found is not None, pyspark.__version__
    return int(found.group(1)), int(found.group(2))


def test_the_features_are_those_of_the_installed_release():
    from spark_integration.compat import FEATURES

    assert FEATURES.version == pyspark.__version__
    assert FEATURES.filter_pushdown == (release() >= (4, 1))
    assert FEATURES.stream_arrow_writer == (release() >= (4, 1))
    assert FEATURES.stream_admission_control == (release() >= (4, 2))


def test_what_is_missing_is_logged_once_naming_the_version(caplog):
    from spark_integration import compat

    compat._logged = False
    with caplog.at_level(logging.WARNING, logger="spark_integration.compat"):
        compat.log_degradations()
        compat.log_degradations()
    messages = [r.getMessage() for r in caplog.records if r.name == "spark_integration.compat"]
    expected = [("filter pushdown", release() < (4, 1)), ("admission control", release() < (4, 2))]
    assert len(messages) == sum(missing for _, missing in expected)
    for feature, missing in expected:
        assert any(feature in m for m in messages) == missing, feature
    assert all(m.startswith(f"pyspark {pyspark.__version__}: no ") for m in messages)


def test_the_arrow_schema_has_utc_instants_and_zoneless_local_times():
    pa = pytest.importorskip("pyarrow")
    from pyspark.sql.types import StringType, StructField, StructType, TimestampNTZType, TimestampType

    from spark_integration.compat import to_arrow_schema

    schema = StructType([StructField("ts", TimestampType()), StructField("local", TimestampNTZType()),
                         StructField("s", StringType())])
    assert to_arrow_schema(schema) == pa.schema([("ts", pa.timestamp("us", tz="UTC")), ("local", pa.timestamp("us")),
                                                 ("s", pa.string())])
