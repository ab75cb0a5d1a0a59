"""Which Delta protocols this project reads and writes, and the checks that refuse the others.

A table's ``protocol`` action names the reader and writer versions (and, for reader 3 / writer 7, the
table features) a client must implement. Reading or writing a table whose protocol asks for more than
we implement could return wrong rows or corrupt it, so :func:`check_readable` and
:func:`check_writable` refuse such tables with :class:`~table.errors.UnsupportedFeatureError`, naming
the feature (for legacy versions, the feature that version introduced) and the clients that can.

Readers and writers are judged apart, as PROTOCOL.md asks: a feature may be honoured for reading and
not for writing (a writer feature newer than this project), so a table can be readable here and still
refuse our writes.
:data:`READER_FEATURES` and :data:`WRITER_FEATURES` say, for every feature PROTOCOL.md names, what
dynacommit does with it; the docs' table of features is checked against them.
"""

from __future__ import annotations

from collections.abc import Mapping

from logstore.errors import ArgumentTypeError, InvalidArgumentError
from table.errors import UnsupportedFeatureError
from table.log import collations, iceberg_compat, properties
from table.log.actions import Metadata, Protocol
from table.log.schema import required_features, type_change_problems

__all__ = [
    "MAX_READER_VERSION",
    "MAX_WRITER_VERSION",
    "READER_FEATURES",
    "SUPPORTED_READER_FEATURES",
    "SUPPORTED_WRITER_FEATURES",
    "WRITER_FEATURES",
    "check_readable",
    "check_writable",
    "feature_name",
    "FEATURE_PREFIX",
    "feature_properties",
    "supports",
    "has_writer_feature",
    "merged_protocol",
    "minimal_protocol",
    "missing_features",
    "NEEDED_BECAUSE",
    "needed_features",
    "upgraded_protocol",
    "with_features",
]

MAX_READER_VERSION = 2
"""Highest legacy reader version implemented (2 is column mapping). 3 is accepted through features."""

MAX_WRITER_VERSION = 6
"""Highest legacy writer version implemented: 2 means respecting ``delta.appendOnly`` and invariants, 3
CHECK constraints, 4 the change data feed and generated columns, 5 column mapping, 6 identity columns
(all enforced on the data path: table.data.rules)."""

READER_FEATURES: Mapping[str, str] = {
    "timestampNtz": "timestamp_ntz columns read as Arrow timestamps without a zone",
    "deletionVectors": "rows a file's deletion vector deletes are dropped by every read (table.data.read)",
    "columnMapping": "files are read by physical names and field ids, every API speaks logical names "
                     "(table.log.column_mapping); reader version 2 too",
    "v2Checkpoint": "V2 checkpoints read: UUID-named JSON or Parquet checkpoints, their sidecar files, "
                    "checkpointMetadata, and _last_checkpoint pointing at one",
    "vacuumProtocolCheck": "nothing to do for readers (it binds VACUUM, which checks the writer protocol)",
    "typeWidening": "files written before a column was widened read as the column's current type; every "
                    "recorded type change is checked to be one Delta allows",
    "typeWidening-preview": "as typeWidening (the name Delta 3.2 and 3.3 wrote)",
    "variantType": "variant columns read as their Parquet form, a struct of metadata and value binaries",
    "variantType-preview": "as variantType (the name Delta 4.0 previews wrote)",
    "variantShredding": "a file storing a variant column shredded (typed_value columns, the Parquet Variant "
                        "Shredding specification) is reassembled into the unshredded metadata and value when it "
                        "is read, whole and in memory (table.data.shredding)",
    "variantShredding-preview": "as variantShredding (the name Delta 4.0 previews wrote)",
}
"""Reader features (protocol 3) read correctly here, and how."""

WRITER_FEATURES: Mapping[str, str] = {
    "appendOnly": "delta.appendOnly enforced (AppendOnlyError)",
    "changeDataFeed": "row-level changes write change data files when delta.enableChangeDataFeed is set",
    "timestampNtz": "timestamp_ntz columns written",
    "deletionVectors": "every rewrite reads files with their vectors applied; row-level changes write vectors "
                       "when delta.enableDeletionVectors is set",
    "columnMapping": "files are written with physical names and field ids; writer version 5 too",
    "domainMetadata": "domains kept through every commit and checkpoint; a commit that changes a domain "
                      "conflicts with a concurrent one changing the same domain",
    "rowTracking": "every file written gets baseRowId above the delta.rowTracking high-water mark and "
                   "defaultRowCommitVersion, and the commit moves the high-water mark",
    "inCommitTimestamp": "the commitInfo of every commit, first action, carries inCommitTimestamp, later than "
                         "the previous commit's",
    "v2Checkpoint": "checkpoints of a table with delta.checkpointPolicy=v2 are V2 (UUID-named, with "
                    "checkpointMetadata); never multi-part",
    "vacuumProtocolCheck": "vacuum checks the writer protocol first",
    "checkpointProtection": "checkpoints are written only at versions whose protocol we can write, and "
                            "dynacommit never deletes log files or checkpoints",
    "typeWidening": "every type change (t.alter.change_column_type, schema evolution with "
                    "delta.enableTypeWidening) recorded in delta.typeChanges, and only the changes Delta allows",
    "typeWidening-preview": "as typeWidening (the name Delta 3.2 and 3.3 wrote)",
    "clustering": "new files are written unclustered, with statistics for every clustering column; the "
                  "delta.clustering domain is kept",
    "invariants": "delta.invariants of every column checked on every row written (table.data.rules); writer "
                  "version 2 too",
    "checkConstraints": "every delta.constraints.* expression checked on every row written, by every write path "
                        "(table.data.rules); Table.alter.add_constraint / drop_constraint; writer version 3 too",
    "generatedColumns": "delta.generationExpression computed when the data omits the column, checked when it "
                        "gives it (table.data.rules); writer version 4 too",
    "allowColumnDefaults": "a column's CURRENT_DEFAULT written where rows lack the column (appends, MERGE inserts; "
                           "table.data.rules); Table.alter.set_column_default / drop_column_default",
    "icebergCompatV1": "while delta.enableIcebergCompatV1 is true: column mapping required, no deletionVectors, no "
                       "array/map/void columns, partition values materialized in every data file, numRecords in every "
                       "file's stats, Iceberg-compatible type changes only, partition columns kept "
                       "(table.log.iceberg_compat)",
    "icebergCompatV2": "while delta.enableIcebergCompatV2 is true: as icebergCompatV1, but arrays and maps allowed with "
                       "their nested ids written as Parquet field ids, V2's type allow-list, deletion vectors off, V1 "
                       "inactive (table.log.iceberg_compat)",
    "collations": "__COLLATIONS kept through every schema change (a renamed column's entries follow it), UTF-8 "
                  "binary statistics; DELETE, UPDATE, MERGE, replaceWhere and CHECK constraints or generation "
                  "expressions over a collated column refused (table.log.collations)",
    "variantType": "variant columns written unshredded, a struct of the value and metadata binaries, each value "
                   "checked against the Variant binary encoding first, statistics a nullCount only "
                   "(table.data.variant)",
    "variantType-preview": "as variantType (the name Delta 4.0 previews wrote)",
    "variantShredding": "variant values written unshredded, as the feature allows whatever "
                        "delta.enableVariantShredding says; shredded files of other writers read reassembled and "
                        "rewritten unshredded by DML and OPTIMIZE",
    "variantShredding-preview": "as variantShredding (the name Delta 4.0 previews wrote)",
    "identityColumns": "values handed out above delta.identity.highWaterMark on every write path, the mark moved "
                       "by the commit; explicit values only with allowExplicitInsert; concurrent appends re-planned "
                       "(table.data.identity); writer version 6 too",
}
"""Writer features (protocol 7) honoured here, and how. A writer must *enforce* a feature to claim it."""

SUPPORTED_READER_FEATURES: frozenset[str] = frozenset(READER_FEATURES)
SUPPORTED_WRITER_FEATURES: frozenset[str] = frozenset(WRITER_FEATURES)

UNUSED_WRITER_FEATURES: frozenset[str] = frozenset()
"""Writer features that a table may list and that we can honour only while nothing uses them (none now:
invariants, CHECK constraints, generated and identity columns are enforced, see table.data.rules)."""

REFUSED: Mapping[str, str] = {
    "catalogManaged": "the catalog managing the table, not its _delta_log, decides which commits exist, and "
                      "PROTOCOL.md forbids reading or writing it through the files alone",
}
"""Why a feature PROTOCOL.md (or Delta's previews) names is refused, for the messages and the docs."""

CLIENTS = "delta-spark or deltalake (delta-rs)"

_INSTEAD: Mapping[str, str] = {
    "catalogManaged": "use it through its catalog (for example delta-spark 4.0+ with Unity Catalog, by the table's "
                      "name, not its path), or have the catalog make a copy that is not catalog-managed (a deep "
                      "CLONE to a path) for dynacommit to write",
}
"""What to do instead, for features no path-based client may read or write."""


def _instead(feature: str, verb: str) -> str:
    return _INSTEAD.get(feature) or f"{verb} it with {CLIENTS}"
CONSTRAINT_PREFIX = "delta.constraints."

_LEGACY_READER = {2: ("columnMapping", "column mapping")}
_LEGACY_WRITER = {
    5: ("columnMapping", "column mapping"),
}


def _why(feature: str) -> str:
    reason = REFUSED.get(feature)
    return f" ({reason})" if reason else ""


def column_mapping_supported(protocol: Protocol) -> bool:
    """Whether ``delta.columnMapping.mode`` is to be honoured: reader version 2, or 3 with the feature."""
    return protocol.min_reader_version == 2 or "columnMapping" in (protocol.reader_features or [])


def check_readable(protocol: Protocol, *, metadata: Metadata | None = None) -> None:
    """Raise ``UnsupportedFeatureError`` unless this project can read a table with ``protocol`` correctly.

    Reader versions 1 and 2 are read; version 3 only if every ``readerFeatures`` entry is in
    :data:`SUPPORTED_READER_FEATURES`. Given ``metadata``, what the schema asks of readers is checked
    too: the type changes recorded under ``typeWidening`` must be ones Delta allows. The error names the
    feature (or the legacy version) and the clients that can.
    """
    reader = protocol.min_reader_version
    if reader == 3:
        unsupported = sorted(set(protocol.reader_features or []) - SUPPORTED_READER_FEATURES)
        if unsupported:
            raise UnsupportedFeatureError(
                f"the table requires reader feature(s) {', '.join(unsupported)}, which dynacommit cannot "
                f"read{_why(unsupported[0])}; {_instead(unsupported[0], 'read')}",
                feature=unsupported[0],
            )
    elif reader > MAX_READER_VERSION:
        feature, what = _LEGACY_READER.get(reader, (f"reader version {reader}", "a newer Delta protocol"))
        raise UnsupportedFeatureError(
            f"the table requires Delta reader version {reader} ({what}, feature {feature}), which dynacommit cannot read"
            f"{_why(feature)}; dynacommit reads versions 1 and 3 (with features "
            f"{', '.join(sorted(SUPPORTED_READER_FEATURES))}); read it with {CLIENTS}",
            feature=feature,
        )
    if metadata is not None:
        _check_schema_readable(protocol, metadata)


def _check_schema_readable(protocol: Protocol, metadata: Metadata) -> None:
    features = set(protocol.reader_features or []) if protocol.min_reader_version == 3 else set()
    problems = type_change_problems(metadata.schema_string)
    if problems:
        feature = "typeWidening" if "typeWidening" in features or "typeWidening-preview" not in features \
            else "typeWidening-preview"
        raise UnsupportedFeatureError(
            f"the table's schema records type changes dynacommit cannot read ({'; '.join(problems)}): files "
            f"written before them cannot be converted to the current types exactly; read it with {CLIENTS}",
            feature=feature,
        )


def check_writable(protocol: Protocol, *, metadata: Metadata | None = None) -> None:
    """Raise ``UnsupportedFeatureError`` unless this project can write a table with ``protocol``.

    A writer must also be able to read the table, so this runs :func:`check_readable` first. Writer
    versions 1-6 are written; 7 only if every
    ``writerFeatures`` entry is in :data:`SUPPORTED_WRITER_FEATURES` (or unused, see
    :data:`UNUSED_WRITER_FEATURES`, when ``metadata`` is given). Given ``metadata``, the schema is
    checked too: column metadata that binds writers in a way we do not implement (column defaults ...) is
    refused.
    """
    check_readable(protocol, metadata=metadata)
    writer = protocol.min_writer_version
    if writer == 7:
        honoured = SUPPORTED_WRITER_FEATURES | (UNUSED_WRITER_FEATURES if metadata is not None else frozenset())
        unsupported = sorted(set(protocol.writer_features or []) - honoured)
        if unsupported:
            raise UnsupportedFeatureError(
                f"the table requires writer feature(s) {', '.join(unsupported)}, which dynacommit does not "
                f"implement{_why(unsupported[0])}; {_instead(unsupported[0], 'write')}",
                feature=unsupported[0],
            )
    elif writer > MAX_WRITER_VERSION:
        feature, what = _LEGACY_WRITER.get(writer, (f"writer version {writer}", "a newer Delta protocol"))
        raise UnsupportedFeatureError(
            f"the table requires Delta writer version {writer} ({what}, feature {feature}); dynacommit writes "
            f"versions 1 to 6 and 7 "
            f"(with features {', '.join(sorted(SUPPORTED_WRITER_FEATURES))}); write it with {CLIENTS}",
            feature=feature,
        )
    if metadata is not None:
        iceberg_compat.check_table(protocol, metadata)
        collations.check_rules(protocol, metadata)
        unsupported = sorted(required_features(metadata.schema_string) - SUPPORTED_WRITER_FEATURES)
        if unsupported:
            raise UnsupportedFeatureError(
                f"the table's schema uses {', '.join(unsupported)} (column metadata), which dynacommit does not "
                f"enforce{_why(unsupported[0])}; write it with {CLIENTS}",
                feature=unsupported[0],
            )


def has_writer_feature(protocol: Protocol | None, feature: str) -> bool:
    """Whether ``protocol`` lists writer feature ``feature`` (writer version 7 only: legacy versions
    imply only the features of their version, none of which is asked here)."""
    return protocol is not None and protocol.min_writer_version == 7 and feature in (protocol.writer_features or [])



# ----------------------------------------------------------------------------- choosing a protocol
_LEGACY_WRITER_FEATURES = {2: {"appendOnly", "invariants"}, 3: {"checkConstraints"},
                           4: {"changeDataFeed", "generatedColumns"}, 5: {"columnMapping"}, 6: {"identityColumns"}}


_WRITER_ONLY_SCHEMA_FEATURES = frozenset({"invariants", "generatedColumns", "identityColumns", "allowColumnDefaults"})
"""Features column metadata asks for that bind writers only."""


def needed_features(schema_json: str, configuration: Mapping[str, str | None]) -> tuple[set[str], set[str]]:
    """The reader and the writer features a table with this schema and these properties needs: what the
    schema uses (``timestampNtz``, ``columnMapping``), and what the properties turn on
    (``delta.enableDeletionVectors``, ``delta.checkpointPolicy=v2``, ``delta.appendOnly``,
    ``delta.enableChangeDataFeed``, ``delta.enableInCommitTimestamps``, ``delta.enableRowTracking``). Reader
    features are writer features too."""
    used = required_features(schema_json)
    reader = used - _WRITER_ONLY_SCHEMA_FEATURES
    if properties.deletion_vectors(configuration):
        reader.add("deletionVectors")
    if properties.checkpoint_policy(configuration) == "v2":
        reader.add("v2Checkpoint")
    writer = reader | used
    if any(k.startswith(CONSTRAINT_PREFIX) for k in configuration):
        writer.add("checkConstraints")
    if properties.append_only(configuration):
        writer.add("appendOnly")
    if properties.change_data_feed(configuration):
        writer.add("changeDataFeed")
    if properties.in_commit_timestamps(configuration):
        writer.add("inCommitTimestamp")
    if properties.row_tracking(configuration):
        writer |= {"rowTracking", "domainMetadata"}
    if properties.type_widening(configuration):
        reader.add("typeWidening")
        writer.add("typeWidening")
    writer |= {iceberg_compat.FEATURE[v] for v in iceberg_compat.enabled_versions(configuration)}
    return reader, writer


def minimal_protocol(schema_json: str, configuration: Mapping[str, str | None]) -> Protocol:
    """The least protocol a table with this schema and these properties needs, as Delta chooses it: legacy
    versions while they suffice (reader 1 / writer 2; writer 4 for the change data feed; reader 2 / writer 5
    for column mapping), else writer 7 listing exactly the features needed, with reader 3 listing the
    reader features when there are any (reader 2 when column mapping is the only one, reader 1 when there
    is none)."""
    reader, writer = needed_features(schema_json, configuration)
    legacy = {f: v for v, features in _LEGACY_WRITER_FEATURES.items() for f in features}
    if reader <= {"columnMapping"} and writer <= set(legacy):
        mapped = "columnMapping" in reader
        return Protocol(min_reader_version=2 if mapped else 1,
                        min_writer_version=max([2, *(legacy[f] for f in writer)]))
    return _features_protocol(reader, writer, reader_version=1)


def upgraded_protocol(current: Protocol, schema_json: str, configuration: Mapping[str, str | None]) -> Protocol | None:
    """The protocol a table on ``current`` needs once it has this schema and these properties: None when
    ``current`` already allows them, else ``current`` with what is missing added (legacy versions raised
    while they suffice, else table features, keeping every feature ``current`` has or implies)."""
    reader_need, writer_need = needed_features(schema_json, configuration)
    reader_have = _reader_features_of(current)
    writer_have = _writer_features_of(current)
    if _with_previews(reader_need, reader_have) <= reader_have and _with_previews(writer_need, writer_have) <= writer_have:
        return None
    needed = minimal_protocol(schema_json, configuration)
    if current.min_writer_version < 7 and needed.min_writer_version < 7:
        return Protocol(min_reader_version=max(current.min_reader_version, needed.min_reader_version),
                        min_writer_version=max(current.min_writer_version, needed.min_writer_version))
    return _features_protocol(reader_have | reader_need, writer_have | writer_need,
                              reader_version=current.min_reader_version)


def _with_previews(need: set[str], have: set[str]) -> set[str]:
    """``need`` with a feature the protocol lists under its ``-preview`` name (Delta's previews) named so."""
    return {f + "-preview" if f not in have and f + "-preview" in have else f for f in need}


def merged_protocol(a: Protocol, b: Protocol) -> Protocol:
    """A protocol with every feature of ``a`` and of ``b`` (Delta's ``Protocol.merge``): the larger legacy
    versions while both are legacy, else table features, every feature either has or implies."""
    if a.min_writer_version < 7 and b.min_writer_version < 7:
        return Protocol(min_reader_version=max(a.min_reader_version, b.min_reader_version),
                        min_writer_version=max(a.min_writer_version, b.min_writer_version))
    return _features_protocol(_reader_features_of(a) | _reader_features_of(b),
                              _writer_features_of(a) | _writer_features_of(b),
                              reader_version=max(a.min_reader_version, b.min_reader_version))


NEEDED_BECAUSE: Mapping[str, str] = {
    "timestampNtz": "a timestamp_ntz column",
    "variantType": "a variant column",
    "columnMapping": "column mapping (delta.columnMapping.* in the schema)",
    "invariants": "delta.invariants in the schema",
    "checkConstraints": "a CHECK constraint (delta.constraints.*)",
    "generatedColumns": "a generated column",
    "identityColumns": "an identity column",
    "allowColumnDefaults": "a column default",
    "deletionVectors": "delta.enableDeletionVectors=true",
    "v2Checkpoint": "delta.checkpointPolicy=v2",
    "appendOnly": "delta.appendOnly=true",
    "changeDataFeed": "delta.enableChangeDataFeed=true",
    "inCommitTimestamp": "delta.enableInCommitTimestamps=true",
    "rowTracking": "delta.enableRowTracking=true",
    "typeWidening": "delta.enableTypeWidening=true or type changes recorded in the schema (delta.typeChanges)",
    "domainMetadata": "delta.enableRowTracking=true",
    "icebergCompatV1": "delta.enableIcebergCompatV1=true",
    "icebergCompatV2": "delta.enableIcebergCompatV2=true",
}
"""Why a table needs a feature: what in its schema or properties asks for it (:func:`needed_features`)."""


def missing_features(protocol: Protocol, metadata: Metadata) -> tuple[list[str], list[str]]:
    """The reader and the writer features that a table with ``metadata`` needs (:func:`needed_features`:
    what its schema uses and its properties turn on) and that ``protocol`` neither lists nor implies by
    its legacy versions. Both empty for a sound table; anything else breaks Delta's protocol (a client
    that does not know a missing feature misreads or miswrites the table). A ``-preview`` name Delta
    once wrote stands for its feature."""
    reader_need, writer_need = needed_features(metadata.schema_string, metadata.configuration)
    reader_have, writer_have = _reader_features_of(protocol), _writer_features_of(protocol)

    def lacking(need: set[str], have: set[str]) -> list[str]:
        return sorted(f for f in need if f not in have and f + "-preview" not in have)

    return lacking(reader_need, reader_have), lacking(writer_need, writer_have)


def _features_protocol(reader: set[str], writer: set[str], *, reader_version: int) -> Protocol:
    """Writer 7 with ``writer``; reader 3 with ``reader`` when a reader feature needs it (or the reader
    version already is 3), else the legacy reader version that covers ``reader``."""
    if reader - {"columnMapping"} or reader_version >= 3:
        return Protocol(min_reader_version=3, min_writer_version=7, reader_features=sorted(reader),
                        writer_features=sorted(writer | reader))
    return Protocol(min_reader_version=max(reader_version, 2 if reader else 1), min_writer_version=7,
                    writer_features=sorted(writer | reader))


def _reader_features_of(protocol: Protocol) -> set[str]:
    """The reader features ``protocol`` lists, or that its legacy reader version implies."""
    if protocol.min_reader_version >= 3:
        return set(protocol.reader_features or [])
    return {"columnMapping"} if protocol.min_reader_version == 2 else set()


def _writer_features_of(protocol: Protocol) -> set[str]:
    """The writer features ``protocol`` lists, or that its legacy writer version implies."""
    if protocol.min_writer_version >= 7:
        return set(protocol.writer_features or [])
    return {f for v, features in _LEGACY_WRITER_FEATURES.items() if v <= protocol.min_writer_version
            for f in features}


# ----------------------------------------------------------------------------- adding a feature
DELTALAKE_FEATURE_NAMES: Mapping[str, str] = {
    "AppendOnly": "appendOnly", "ChangeDataFeed": "changeDataFeed", "CheckConstraints": "checkConstraints",
    "ColumnMapping": "columnMapping", "DeletionVectors": "deletionVectors", "DomainMetadata": "domainMetadata",
    "GeneratedColumns": "generatedColumns", "IcebergCompatV1": "icebergCompatV1", "IdentityColumns": "identityColumns",
    "Invariants": "invariants", "RowTracking": "rowTracking", "TimestampWithoutTimezone": "timestampNtz",
    "V2Checkpoint": "v2Checkpoint", "VariantType": "variantType", "VariantTypePreview": "variantType-preview",
}
"""deltalake's ``TableFeatures`` members, by name, and the Delta feature each stands for."""

READER_WRITER_FEATURES: frozenset[str] = frozenset(READER_FEATURES) | frozenset(
    {"variantShredding", "variantShredding-preview", "catalogManaged"})
"""Features that bind readers as well as writers: adding one lists it in both, with reader version 3."""

_KNOWN_FEATURES = frozenset(WRITER_FEATURES) | frozenset(READER_FEATURES) | frozenset(REFUSED)


def feature_name(feature: object) -> str:
    """The Delta name of ``feature``: a Delta feature name (``"deletionVectors"``), or deltalake's
    ``TableFeatures`` member (``TableFeatures.DeletionVectors``) or its name, in any case. Raises InvalidArgumentError
    for a name Delta does not define."""
    text = feature if isinstance(feature, str) else str(feature) if type(feature).__name__ == "TableFeatures"         else None
    if text is None:
        raise ArgumentTypeError(f"a table feature is a name such as 'deletionVectors' or deltalake's TableFeatures "
                                f"member, got {type(feature).__name__} {feature!r}")
    text = text.removeprefix("TableFeatures.")
    name = DELTALAKE_FEATURE_NAMES.get(text, text)
    # matched without regard to case: Spark hands a data source its options lower-cased
    name = {known.lower(): known for known in _KNOWN_FEATURES}.get(name.lower(), name)
    if name not in _KNOWN_FEATURES:
        raise InvalidArgumentError(f"{feature!r} is not a Delta table feature dynacommit knows; the features are: "
                                   f"{', '.join(sorted(_KNOWN_FEATURES))}")
    return name


FEATURE_PREFIX = "delta.feature."
"""``delta.feature.<name>: "supported"``: Delta's table property that adds a feature to the protocol; it is
consumed by the commit and never kept among the table's properties."""


def feature_properties(given: object) -> tuple[object, list[str]]:
    """``given`` (table properties) without its ``delta.feature.*`` keys, and the features those add (Delta
    names). A value other than ``supported`` (or Delta's older ``enabled``) raises InvalidArgumentError.
    Anything that is not a mapping is returned as it is, for the properties' own check to name."""
    if not isinstance(given, Mapping):
        return given, []
    names, rest = [], {}
    for key, value in given.items():
        if not isinstance(key, str) or not key.lower().startswith(FEATURE_PREFIX):
            rest[key] = value
            continue
        if not isinstance(value, str) or value.lower() not in ("supported", "enabled"):
            raise InvalidArgumentError(f"table property {key!r} takes the value 'supported' (it adds the feature "
                                       f"to the protocol; features cannot be removed this way), got {value!r}")
        names.append(feature_name(key[len(FEATURE_PREFIX):]))
    return rest, list(dict.fromkeys(names))


def supports(protocol: Protocol, feature: str) -> bool:
    """Whether ``protocol`` lists ``feature`` or implies it by its legacy versions."""
    return feature in _writer_features_of(protocol) | _reader_features_of(protocol)


def with_features(current: Protocol, names: list[str], *, allow_versions_increase: bool, table: str) -> Protocol | None:
    """``current`` with the table features ``names`` supported (deltalake's ``alter.add_feature``; Delta's
    ``delta.feature.<name>=supported``), or None when it has them all. A feature binding readers moves the
    table to reader 3 / writer 7, a writer feature to writer 7, keeping every feature the old versions implied
    (Delta's rule). Raises UnsupportedFeatureError for a feature dynacommit cannot write, and
    InvalidArgumentError when the versions must rise and ``allow_versions_increase`` is False (as deltalake)."""
    for name in names:
        if name not in SUPPORTED_WRITER_FEATURES:
            raise UnsupportedFeatureError(
                f"dynacommit cannot add table feature {name!r} to {table}: it does not implement it for writing"
                f"{_why(name)}, and a table listing it could then not be written here; "
                f"{_INSTEAD.get(name) or f'add it with {CLIENTS}'}",
                feature=name)
    reader_new = {n for n in names if n in READER_WRITER_FEATURES}
    reader_have, writer_have = _reader_features_of(current), _writer_features_of(current)
    if current.min_writer_version == 7 and reader_new <= reader_have and set(names) <= writer_have:
        return None
    if not allow_versions_increase:
        if reader_new and not (current.min_reader_version == 3 and current.min_writer_version == 7):
            raise InvalidArgumentError(
                f"table feature(s) {sorted(reader_new)} bind readers and writers: table {table} is on reader "
                f"{current.min_reader_version} / writer {current.min_writer_version} and would move to reader 3 / "
                f"writer 7, which older clients cannot read; pass allow_protocol_versions_increase=True")
        if current.min_writer_version < 7:
            raise InvalidArgumentError(
                f"table feature(s) {sorted(names)} need writer version 7: table {table} is on writer "
                f"{current.min_writer_version}; pass allow_protocol_versions_increase=True")
    reader = reader_have | reader_new
    writer = writer_have | set(names) | reader
    if reader_new or current.min_reader_version >= 3:
        return Protocol(min_reader_version=3, min_writer_version=7, reader_features=sorted(reader),
                        writer_features=sorted(writer))
    return Protocol(min_reader_version=current.min_reader_version, min_writer_version=7,
                    writer_features=sorted(writer))
