"""Which Delta protocols this project reads and writes, and the checks that refuse the others.

A table's ``protocol`` action names the reader and writer versions (and, for reader 3 / writer 7, the
table features) a client must implement. Reading or writing a table whose protocol asks for more than
we implement could return wrong rows or corrupt it, so :func:`check_readable` and
:func:`check_writable` refuse such tables with :class:`~table.errors.UnsupportedFeatureError`, naming
the version or feature and the clients that can.
"""

from __future__ import annotations

from table.errors import UnsupportedFeatureError
from table.log.actions import Metadata, Protocol
from table.log.schema import required_features

__all__ = [
    "MAX_READER_VERSION",
    "MAX_WRITER_VERSION",
    "SUPPORTED_READER_FEATURES",
    "SUPPORTED_WRITER_FEATURES",
    "check_readable",
    "check_writable",
]

MAX_READER_VERSION = 1
"""Highest legacy reader version implemented (2 is column mapping). 3 is accepted through features."""

MAX_WRITER_VERSION = 4
"""Highest legacy writer version implemented: 2 means respecting ``delta.appendOnly`` and invariants, 3
CHECK constraints, 4 the change data feed and generated columns. Versions 3 and 4 are written only while
the table has no CHECK constraint and no generated column (which we would have to enforce): the
change data feed is what those versions are used for in practice."""

SUPPORTED_READER_FEATURES: frozenset[str] = frozenset({"timestampNtz"})
"""Reader features (protocol 3) this project reads correctly: a timestamp_ntz column is an Arrow
timestamp without zone, nothing more."""

SUPPORTED_WRITER_FEATURES: frozenset[str] = frozenset({"timestampNtz", "appendOnly", "changeDataFeed"})
"""Writer features (protocol 7) this project honours: it writes ``timestamp_ntz`` columns, enforces
``delta.appendOnly`` (:class:`~table.errors.AppendOnlyError`) and writes change data files for row-level
operations when ``delta.enableChangeDataFeed`` is set. ``invariants`` is not listed: a writer must
*enforce* a feature to claim it, and we do not evaluate invariants."""

UNUSED_WRITER_FEATURES: frozenset[str] = frozenset({"invariants", "checkConstraints"})
"""Writer features that a table may list (a protocol upgraded from writer version 2 or 3 lists them) and
that we can honour only while nothing uses them: no ``delta.invariants`` in the schema, no
``delta.constraints.*`` property. A table using one is refused (we would have to evaluate them)."""

CLIENTS = "delta-spark or deltalake (delta-rs)"
CONSTRAINT_PREFIX = "delta.constraints."

_LEGACY_READER = {2: "column mapping"}
_LEGACY_WRITER = {
    3: "CHECK constraints and delta.checkpoint.writeStatsAsJson/Struct",
    4: "change data feed and generated columns",
    5: "column mapping",
    6: "identity columns",
}



def check_readable(protocol: Protocol) -> None:
    """Raise ``UnsupportedFeatureError`` unless this project can read a table with ``protocol`` correctly.

    Reader version 1 is read; version 3 only if every ``readerFeatures`` entry is in
    :data:`SUPPORTED_READER_FEATURES`. The error names the version or features and the clients that can.
    """
    reader = protocol.min_reader_version
    if reader <= MAX_READER_VERSION:
        return
    if reader == 3:
        unsupported = sorted(set(protocol.reader_features or []) - SUPPORTED_READER_FEATURES)
        if unsupported:
            raise UnsupportedFeatureError(
                f"the table requires reader feature(s) {', '.join(unsupported)}, which dynacommit cannot read; "
                f"read it with {CLIENTS}",
                feature=unsupported[0],
            )
        return
    what = _LEGACY_READER.get(reader, "a newer Delta protocol")
    raise UnsupportedFeatureError(
        f"the table requires Delta reader version {reader} ({what}); dynacommit reads versions 1 and 3 "
        f"(with features {', '.join(sorted(SUPPORTED_READER_FEATURES))}); read it with {CLIENTS}",
        feature=f"reader version {reader}",
    )


def check_writable(protocol: Protocol, *, metadata: Metadata | None = None) -> None:
    """Raise ``UnsupportedFeatureError`` unless this project can write a table with ``protocol``.

    A writer must also be able to read the table, so this runs :func:`check_readable` first. Writer
    versions 1-2 are written; 7 only if every ``writerFeatures`` entry is in
    :data:`SUPPORTED_WRITER_FEATURES`. Given ``metadata``, the schema is checked too: writer version 2
    makes ``delta.invariants`` column metadata binding, and this project does not evaluate invariants.
    """
    check_readable(protocol)
    writer = protocol.min_writer_version
    if writer == 7:
        honoured = SUPPORTED_WRITER_FEATURES | (UNUSED_WRITER_FEATURES if metadata is not None else frozenset())
        unsupported = sorted(set(protocol.writer_features or []) - honoured)
        if unsupported:
            raise UnsupportedFeatureError(
                f"the table requires writer feature(s) {', '.join(unsupported)}, which dynacommit does not "
                f"implement; write it with {CLIENTS}",
                feature=unsupported[0],
            )
    elif writer > MAX_WRITER_VERSION:
        what = _LEGACY_WRITER.get(writer, "a newer Delta protocol")
        raise UnsupportedFeatureError(
            f"the table requires Delta writer version {writer} ({what}); dynacommit writes versions 1 to 4 and 7 "
            f"(with features {', '.join(sorted(SUPPORTED_WRITER_FEATURES))}); write it with {CLIENTS}",
            feature=f"writer version {writer}",
        )
    if metadata is not None and (writer in (3, 4) or "checkConstraints" in (protocol.writer_features or [])):
        constraints = sorted(k for k in metadata.configuration if k.startswith(CONSTRAINT_PREFIX))
        if constraints:
            raise UnsupportedFeatureError(
                f"the table has CHECK constraint(s) {', '.join(constraints)} (feature checkConstraints), which "
                f"dynacommit does not enforce; write it with {CLIENTS}",
                feature="checkConstraints",
            )
    if metadata is not None:
        unsupported = sorted(required_features(metadata.schema_string) - SUPPORTED_WRITER_FEATURES)
        if unsupported:
            raise UnsupportedFeatureError(
                f"the table's schema uses {', '.join(unsupported)} (column metadata), which dynacommit does not "
                f"enforce; write it with {CLIENTS}",
                feature=unsupported[0],
            )
