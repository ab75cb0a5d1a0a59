"""A bucket with versioning on, and what a table has left in it: every object version and delete marker.

With versioning on, an object that was uploaded and then deleted still has its version (and a delete
marker), so a write that uploads and then takes its files back leaves a trace a plain listing hides.
"""

from __future__ import annotations

import dataclasses
import json
import uuid

from logstore import StorageOptions, open_log_store
from logstore.aws import call, s3_client


def make_versioned_bucket(local_stack, name: str) -> None:
    """Create bucket ``name`` on the local stack with versioning enabled."""
    local_stack.create_bucket(name)
    s3 = s3_client(StorageOptions.resolve(local_stack.storage_options()))
    call("s3:PutBucketVersioning", s3.put_bucket_versioning, Bucket=name,
         VersioningConfiguration={"Status": "Enabled"})


def table_uri(bucket: str) -> str:
    return f"s3://{bucket}/tables/{uuid.uuid4().hex[:12]}"


@dataclasses.dataclass(frozen=True)
class Trace:
    """Every object version and delete marker under a table's prefix (log included), and its pending
    multipart uploads."""

    versions: frozenset[tuple[str, str]]  # (key relative to the table, version id)
    markers: frozenset[tuple[str, str]]
    uploads: frozenset[tuple[str, str]]   # (key, upload id)

    def since(self, before: Trace) -> Trace:
        return Trace(self.versions - before.versions, self.markers - before.markers, self.uploads - before.uploads)

    @property
    def empty(self) -> bool:
        return not (self.versions or self.markers or self.uploads)


def trace(uri: str, options: dict[str, str]) -> Trace:
    """What the table at ``uri`` has in its (versioned) bucket now, once this process's finishing steps of its
    commits to the table have ended (``write`` returns before its temp file's DELETE, whose delete marker would
    otherwise land on either side of the look)."""
    store = open_log_store(uri, storage_options=options)
    store.wait_finished(30)
    bucket, prefix = store.uri.bucket, store.uri.key("")
    s3 = s3_client(StorageOptions.resolve(options))
    versions, markers = set(), set()
    kwargs = {"Bucket": bucket, "Prefix": prefix}
    while True:
        page = call("s3:ListObjectVersions", s3.list_object_versions, **kwargs)
        versions |= {(v["Key"][len(prefix):], v["VersionId"]) for v in page.get("Versions", [])}
        markers |= {(m["Key"][len(prefix):], m["VersionId"]) for m in page.get("DeleteMarkers", [])}
        if not page.get("IsTruncated"):
            break
        kwargs.update(KeyMarker=page["NextKeyMarker"], VersionIdMarker=page["NextVersionIdMarker"])
    listed = call("s3:ListMultipartUploads", s3.list_multipart_uploads, Bucket=bucket, Prefix=prefix)
    uploads = {(u["Key"][len(prefix):], u["UploadId"]) for u in listed.get("Uploads", [])}
    return Trace(frozenset(versions), frozenset(markers), frozenset(uploads))


def raw_table(uri: str, options: dict[str, str], *, version: int = 0, writer_version: int = 7,
              writer: list[str] | None = None, configuration: dict[str, str] | None = None,
              column_metadata: dict | None = None, schema_id: str = "t") -> str:
    """Commit ``version`` of a table with a ``long`` column ``n`` (carrying ``column_metadata``) by writing its
    log entry directly, as another Delta writer would: a protocol dynacommit may refuse to write (writer
    version ``writer_version``, listing ``writer`` at version 7) and table properties ``configuration``."""
    protocol = {"minReaderVersion": 1, "minWriterVersion": writer_version,
                **({"writerFeatures": writer or []} if writer_version == 7 else {})}
    schema = json.dumps({"type": "struct", "fields": [{"name": "n", "type": "long", "nullable": True,
                                                       "metadata": column_metadata or {}}]})
    body = "\n".join(json.dumps(a) for a in (
        {"commitInfo": {"operation": "CREATE TABLE" if version == 0 else "SET TBLPROPERTIES"}},
        {"protocol": protocol},
        {"metaData": {"id": schema_id, "format": {"provider": "parquet", "options": {}}, "schemaString": schema,
                      "partitionColumns": [], "configuration": configuration or {}, "createdTime": 0}})) + "\n"
    open_log_store(uri, storage_options=options).write(version, body.encode())
    return uri
