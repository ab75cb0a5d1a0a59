"""The S3 implementation of :class:`logstore.objects.ObjectStore` (boto3)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from logstore import retry
from logstore.aws import ConditionFailed, ObjectNotFound, call, s3_client
from logstore.errors import StorageError
from logstore.objects import NewUpload, ObjectInfo, ObjectStore, Part, UploadInfo
from logstore.options import StorageOptions

_DELETE_BATCH = 1000  # S3 DeleteObjects limit
_COPY_LIMIT = 5 * 1024 ** 3  # the largest object one CopyObject copies; larger ones are copied in parts
_COPY_PART = 512 * 1024 ** 2  # the range each UploadPartCopy copies


def _conflict(exc: Exception) -> bool:
    return isinstance(exc, StorageError) and exc.code == "ConditionalRequestConflict"


def _connection(options: StorageOptions) -> tuple:
    """What decides whether two stores reach the same service as the same principal (server-side copies)."""
    return (options.endpoint_url, options.region, options.access_key_id, options.secret_access_key,
            options.session_token)


def _ms(dt) -> int:
    return int(dt.timestamp() * 1000)


class S3ObjectStore(ObjectStore):
    """One S3 bucket through boto3. The client is the process's shared one for these options (logstore/aws.py),
    looked up at each request, so instances pickle as plain options and a forked child uses its own."""

    def __init__(self, bucket: str, options: StorageOptions):
        self.bucket = bucket
        self.options = options

    @property
    def client(self):
        return s3_client(self.options)

    def _where(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def get(self, key: str) -> bytes:
        # The body is read inside the translated call: a broken stream is a storage error like any other.
        return call("s3:GetObject", lambda **kw: self.client.get_object(**kw)["Body"].read(), where=self._where(key),
                    idempotent=True, Bucket=self.bucket, Key=key)

    def get_tagged(self, key: str) -> tuple[bytes, str]:
        def read(**kw):
            response = self.client.get_object(**kw)
            return response["Body"].read(), response["ETag"]

        return call("s3:GetObject", read, where=self._where(key), idempotent=True, Bucket=self.bucket, Key=key)

    def head(self, key: str) -> ObjectInfo | None:
        try:
            r = call("s3:HeadObject", self.client.head_object, where=self._where(key), idempotent=True,
                     Bucket=self.bucket, Key=key)
        except ObjectNotFound:
            return None
        return ObjectInfo(key, int(r["ContentLength"]), _ms(r["LastModified"]))

    def put(self, key: str, body: bytes, *, if_absent: bool = False, if_match: str | None = None) -> bool:
        return self.put_tagged(key, body, if_absent=if_absent, if_match=if_match)[0]

    def put_tagged(self, key: str, body: bytes, *, if_absent: bool = False,
                   if_match: str | None = None) -> tuple[bool, str | None]:
        kwargs = {"Bucket": self.bucket, "Key": key, "Body": body}
        if not if_absent and if_match is None:
            r = call("s3:PutObject", self.client.put_object, where=self._where(key), idempotent=True, **kwargs)
            return True, r.get("ETag")
        condition = {"IfNoneMatch": "*"} if if_absent else {"IfMatch": if_match}

        def put() -> tuple[bool, str | None]:
            try:
                r = call("s3:PutObject", self.client.put_object, where=self._where(key), **condition, **kwargs)
                return True, r.get("ETag")
            except (ConditionFailed, ObjectNotFound):  # If-Match on a key that is gone: 404
                return False, None

        # S3 answers 409 ConditionalRequestConflict while another conditional write of the key is in
        # flight; the key's fate is then decided by that write, so asking again settles it.
        return retry.retry(put, policy=retry.CONFLICT, to_deadline=True, retryable=_conflict,
                           what=f"s3:PutObject on {self._where(key)}")

    def delete(self, keys: Sequence[str]) -> None:
        keys = list(keys)
        for start in range(0, len(keys), _DELETE_BATCH):
            batch = keys[start:start + _DELETE_BATCH]
            response = call(
                "s3:DeleteObjects", self.client.delete_objects, where=self._where(batch[0]), idempotent=True,
                Bucket=self.bucket, Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True},
            )
            errors = response.get("Errors") or []
            if errors:
                first = errors[0]
                raise StorageError(
                    f"s3:DeleteObjects could not delete {len(errors)} of {len(batch)} keys, e.g. "
                    f"{self._where(first.get('Key', '?'))}: {first.get('Code')}: {first.get('Message')}",
                    operation="s3:DeleteObjects", code=str(first.get("Code", "")),
                )

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ObjectInfo]:
        kwargs = {"Bucket": self.bucket, "Prefix": prefix}
        if start_after:
            kwargs["StartAfter"] = start_after
        while True:
            r = call("s3:ListObjectsV2", self.client.list_objects_v2, where=self._where(prefix), idempotent=True,
                     **kwargs)
            for obj in r.get("Contents", []):
                yield ObjectInfo(obj["Key"], int(obj["Size"]), _ms(obj["LastModified"]))
            if not r.get("IsTruncated"):
                return
            kwargs.pop("StartAfter", None)
            kwargs["ContinuationToken"] = r["NextContinuationToken"]

    def copy_from(self, source: ObjectStore, source_key: str, key: str, *, size: int | None = None) -> None:
        """Server-side (CopyObject; UploadPartCopy ranges above 5 GiB) when ``source`` is an S3 store reached
        with the same connection settings (any bucket); else through this process."""
        if not isinstance(source, S3ObjectStore) or _connection(source.options) != _connection(self.options):
            super().copy_from(source, source_key, key, size=size)
            return
        copied = {"Bucket": source.bucket, "Key": source_key}
        if size is None or size <= _COPY_LIMIT:
            call("s3:CopyObject", self.client.copy_object, where=self._where(key), idempotent=True,
                 Bucket=self.bucket, Key=key, CopySource=copied)
            return
        upload = self.create_upload(key).upload_id
        try:
            parts = []
            for number, start in enumerate(range(0, size, _COPY_PART), start=1):
                end = min(start + _COPY_PART, size) - 1
                r = call("s3:UploadPartCopy", self.client.upload_part_copy, where=self._where(key), idempotent=True,
                         Bucket=self.bucket, Key=key, UploadId=upload, PartNumber=number, CopySource=copied,
                         CopySourceRange=f"bytes={start}-{end}")
                parts.append(Part(number, r["CopyPartResult"]["ETag"]))
            self.complete_upload(key, upload, parts)
        except BaseException:
            self.abort_upload(key, upload)
            raise

    def create_upload(self, key: str) -> NewUpload:
        r = call("s3:CreateMultipartUpload", self.client.create_multipart_upload, where=self._where(key),
                 Bucket=self.bucket, Key=key)
        retried = int(r.get("ResponseMetadata", {}).get("RetryAttempts") or 0) > 0
        return NewUpload(r["UploadId"], retried)

    def upload_part(self, key: str, upload_id: str, number: int, body: bytes) -> str:
        r = call("s3:UploadPart", self.client.upload_part, where=self._where(key), idempotent=True,
                 Bucket=self.bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=body)
        return r["ETag"]

    def complete_upload(self, key: str, upload_id: str, parts: Sequence[Part]) -> None:
        call("s3:CompleteMultipartUpload", self.client.complete_multipart_upload, where=self._where(key),
             Bucket=self.bucket, Key=key, UploadId=upload_id,
             MultipartUpload={"Parts": [{"PartNumber": p.number, "ETag": p.etag} for p in parts]})

    def abort_upload(self, key: str, upload_id: str) -> None:
        try:
            call("s3:AbortMultipartUpload", self.client.abort_multipart_upload, where=self._where(key),
                 idempotent=True, Bucket=self.bucket, Key=key, UploadId=upload_id)
        except ObjectNotFound:
            pass

    def list_uploads(self, prefix: str) -> list[UploadInfo]:
        kwargs = {"Bucket": self.bucket, "Prefix": prefix}
        found: list[UploadInfo] = []
        while True:
            r = call("s3:ListMultipartUploads", self.client.list_multipart_uploads, where=self._where(prefix),
                     idempotent=True, **kwargs)
            for u in r.get("Uploads", []):
                found.append(UploadInfo(u["Key"], u["UploadId"], _ms(u["Initiated"])))
            if not r.get("IsTruncated"):
                return found
            kwargs["KeyMarker"] = r["NextKeyMarker"]
            kwargs["UploadIdMarker"] = r["NextUploadIdMarker"]
