"""The read options of ``format("dynacommit")`` for time travel by timestamp and the change data feed, as
Spark hands them (lower-cased keys): what each combination means and the errors of those that mean
nothing. Parsing only: no Spark session, no table."""

from __future__ import annotations

import pytest

from logstore.errors import InvalidArgumentError
from spark_integration.options import (
    ChangeFeedOptions,
    parse_read,
    parse_schema_options,
    parse_sink,
    parse_stream_read,
    parse_write,
)

URI = "s3://b/t"


def lowered(**options: str) -> dict[str, str]:
    return {"path": URI, **{k.lower(): v for k, v in options.items()}}


@pytest.mark.parametrize("raw", ["2026-11-25 10:00:00", "2026-11-25 10:00:00.123", "2026-11-25T10:00:00Z",
                                 "2026-11-25T10:00:00+01:00", "2026-11-25", " 2026-11-25 10:00:00 "])
def test_timestamp_as_of_takes_iso_8601_and_sparks_format(raw):
    parsed = parse_read(lowered(timestampAsOf=raw))
    assert (parsed.timestamp, parsed.version, parsed.change_feed) == (raw.strip(), None, None)


@pytest.mark.parametrize(("options", "message"), [
    ({"timestampAsOf": "yesterday"}, r"option timestampAsOf must be a timestamp like '2026-11-25 10:00:00' \(UTC"),
    ({"timestampAsOf": "  "}, "option timestampAsOf is empty"),
    ({"versionAsOf": "1", "timestampAsOf": "2026-11-25"}, "versionAsOf and timestampAsOf both pick the version"),
    ({"startingVersion": "1"}, "option startingVersion is a change feed option: add readChangeFeed=true"),
    ({"endingTimestamp": "2026-11-25"}, "option endingTimestamp is a change feed option"),
    ({"readChangeFeed": "true"}, "needs where to start: give startingVersion or startingTimestamp"),
    ({"readChangeFeed": "true", "endingVersion": "3"}, "needs where to start"),
    ({"readChangeFeed": "yes", "startingVersion": "0"}, "readChangeFeed must be 'true' or 'false'"),
    ({"readChangeFeed": "true", "startingVersion": "0", "startingTimestamp": "2026-11-25"},
     "startingVersion and startingTimestamp both give one end"),
    ({"readChangeFeed": "true", "startingVersion": "0", "endingVersion": "2", "endingTimestamp": "2026-11-25"},
     "endingVersion and endingTimestamp both give one end"),
    ({"readChangeFeed": "true", "startingVersion": "0", "versionAsOf": "2"}, "do not apply to a change feed read"),
    ({"readChangeFeed": "true", "startingVersion": "-1"}, "startingVersion must be at least 0"),
    ({"readChangeFeed": "true", "startingVersion": "latest"}, "startingVersion must be an integer"),
])
def test_batch_read_options_that_mean_nothing_are_refused_naming_them(options, message):
    with pytest.raises(InvalidArgumentError, match=message):
        parse_read(lowered(**options))


def test_a_change_feed_read_takes_a_range_by_version_or_by_timestamp():
    by_version = parse_read(lowered(readChangeFeed="TRUE", startingVersion="2", endingVersion="5", minPartitions="3"))
    assert by_version.change_feed == ChangeFeedOptions(2, 5, None, None) and by_version.min_partitions == 3
    by_time = parse_read(lowered(readChangeFeed="true", startingTimestamp="2026-11-25 10:00:00",
                                 endingTimestamp="2026-11-26"))
    assert by_time.change_feed == ChangeFeedOptions(None, None, "2026-11-25 10:00:00", "2026-11-26")
    mixed = parse_read(lowered(readChangeFeed="true", startingTimestamp="2026-11-25", endingVersion="7"))
    assert mixed.change_feed == ChangeFeedOptions(None, 7, "2026-11-25", None)
    assert parse_read(lowered(readChangeFeed="false")).change_feed is None


def test_the_schema_step_knows_a_change_feed_read_and_where_its_range_ends():
    """DataSource.schema() cannot tell a batch from a stream: it accepts the options of both."""
    batch = parse_schema_options(lowered(readChangeFeed="true", startingVersion="1", endingVersion="4"))
    assert batch.change_feed == ChangeFeedOptions(None, 4, None, None)
    stream = parse_schema_options(lowered(readChangeFeed="true", startingVersion="latest", maxFilesPerTrigger="5"))
    assert stream.change_feed == ChangeFeedOptions(None, None, None, None)
    assert parse_schema_options(lowered(timestampAsOf="2026-11-25")).timestamp == "2026-11-25"


def test_stream_options_start_by_version_or_by_timestamp_and_follow_changes():
    stream = parse_stream_read(lowered(startingTimestamp="2026-11-25 10:00:00", readChangeFeed="true"))
    assert (stream.starting_timestamp, stream.starting_version, stream.change_feed) == ("2026-11-25 10:00:00", None,
                                                                                      True)
    assert parse_stream_read(lowered(startingVersion="latest", readchangefeed="TRUE")).change_feed
    assert not parse_stream_read(lowered()).change_feed


@pytest.mark.parametrize(("options", "message"), [
    ({"startingVersion": "1", "startingTimestamp": "2026-11-25"}, "startingVersion and startingTimestamp both say"),
    ({"startingTimestamp": "noon"}, "option startingTimestamp must be a timestamp"),
    ({"timestampAsOf": "2026-11-25"}, "time travel does not apply to streams: use startingTimestamp"),
    ({"readChangeFeed": "true", "endingVersion": "3"}, "a stream has no end"),
    ({"readChangeFeed": "true", "skipChangeCommits": "true"}, "skipChangeCommits does not apply to a change feed"),
])
def test_stream_options_that_mean_nothing_are_refused_naming_them(options, message):
    with pytest.raises(InvalidArgumentError, match=message):
        parse_stream_read(lowered(**options))


@pytest.mark.parametrize(("given", "codec"), [
    (None, None), ("zstd", "zstd"), ("ZSTD", "zstd"), (" gzip ", "gzip"), ("lz4", "lz4_raw"),
    ("lz4_raw", "lz4_raw"), ("brotli", "brotli"), ("none", "uncompressed"), ("Uncompressed", "uncompressed"),
    ("snappy", "snappy"),
])
def test_the_compression_option_takes_sparks_codec_names_in_any_case(given, codec):
    options = lowered() if given is None else lowered(compression=given)
    assert parse_write(options).compression == codec
    assert parse_sink({**options, "checkpointlocation": "/tmp/c"}).compression == codec


@pytest.mark.parametrize(("given", "message"), [
    ("zstandard", r"option compression: unknown compression 'zstandard': use one of snappy, zstd, gzip, lz4, "
                  r"lz4_raw, brotli, uncompressed, none"),
    ("lzo", r"option compression: unknown compression 'lzo' \(pyarrow cannot write LZO-compressed Parquet\)"),
    ("", r"option compression: unknown compression ''"),
])
def test_an_unknown_compression_is_refused_naming_the_option_and_the_codecs(given, message):
    with pytest.raises(InvalidArgumentError, match=message):
        parse_write(lowered(compression=given))
    with pytest.raises(InvalidArgumentError, match=message):
        parse_sink(lowered(compression=given))

def test_a_spark_write_takes_the_commit_acknowledgement_as_a_storage_option():
    from logstore.errors import ConfigurationError
    from spark_integration.options import parse_write

    assert parse_write(lowered(DYNACOMMIT_COMMIT_ACK="durable")).storage.commit_ack == "durable"
    assert parse_write(lowered()).storage.commit_ack == "published"
    with pytest.raises(ConfigurationError, match="DYNACOMMIT_COMMIT_ACK='soon'.*'published'.*'durable'"):
        parse_write(lowered(DYNACOMMIT_COMMIT_ACK="soon"))


def test_a_delta_feature_option_reaches_the_write_lower_cased_as_spark_hands_it():
    from table.data.writespec import WriteSpec

    options = parse_write(lowered(**{"delta.feature.deletionVectors": "supported", "delta.appendOnly": "true"}))
    spec = WriteSpec.of(mode="error", configuration=options.configuration)
    assert spec.features == ("deletionVectors",)
    assert spec.configuration == {"delta.appendOnly": "true"}
