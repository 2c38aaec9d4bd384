"""The object store client: boto3 configured once from :class:`backup.config.ObjectStoreConfig`.

Blocking (boto3 is); the backup plane calls it through ``asyncio.to_thread``. Every failure
is :class:`StorageError` with a sentence that names the operation, the key and the server's
error code, never a credential (the keys live only in the boto3 client).

Choices that matter for S3-compatible servers (``rclone serve s3``, MinIO, Ceph): path-style
addressing, checksums only where an operation requires them (boto3 >= 1.36 adds CRC32
trailers by default, which such servers refuse), short connect timeouts and three attempts, so
a server that stops is reported within seconds instead of hanging a backup.

Uploads are multipart (:class:`MultipartWriter`): parts of :data:`PART_SIZE` bytes are sent as
they fill, so a dump is never held whole in memory; a failed or abandoned upload is aborted,
leaving no object.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import botocore.exceptions
from botocore.config import Config

from backup.config import ObjectStoreConfig
from backup.storeerror import StorageError

log = logging.getLogger("backup.objstore")

__all__ = ["PART_SIZE", "MultipartWriter", "ObjectStore", "StorageError"]

#: bytes per multipart part (S3's minimum is 5 MiB for every part but the last)
PART_SIZE = 8 * 1024 * 1024
READ_CHUNK = 1024 * 1024


def _describe(e: BaseException) -> str:
    if isinstance(e, botocore.exceptions.ClientError):
        err = e.response.get("Error", {})
        code = err.get("Code") or e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        msg = str(err.get("Message") or "")[:200]
        return f"{code}: {msg}" if msg else str(code)
    if isinstance(e, (botocore.exceptions.EndpointConnectionError,
                      botocore.exceptions.ConnectionClosedError,
                      botocore.exceptions.ConnectTimeoutError,
                      botocore.exceptions.ReadTimeoutError)):
        return f"unreachable ({type(e).__name__})"
    return type(e).__name__


def _not_found(e: BaseException) -> bool:
    if not isinstance(e, botocore.exceptions.ClientError):
        return False
    code = str(e.response.get("Error", {}).get("Code", ""))
    status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code in ("404", "NoSuchKey", "NoSuchBucket", "NotFound") or status == 404


class ObjectStore:
    """One bucket of one S3-compatible server (see the module docstring)."""

    def __init__(self, cfg: ObjectStoreConfig, *, connect_timeout: float = 5.0,
                 read_timeout: float = 60.0, attempts: int = 3) -> None:
        self.cfg = cfg
        self.endpoint = cfg.effective_endpoint
        self.bucket = cfg.effective_bucket
        self._client = boto3.session.Session().client(
            "s3", endpoint_url=self.endpoint, region_name=cfg.effective_region,
            aws_access_key_id=cfg.effective_access_key,
            aws_secret_access_key=cfg.effective_secret_key,
            config=Config(s3={"addressing_style": "path"},
                          request_checksum_calculation="when_required",
                          response_checksum_validation="when_required",
                          connect_timeout=connect_timeout, read_timeout=read_timeout,
                          retries={"max_attempts": attempts, "mode": "standard"}))
        self._bucket_ok = False

    def __repr__(self) -> str:
        return f"ObjectStore(endpoint={self.endpoint!r}, bucket={self.bucket!r})"

    def _fail(self, what: str, e: BaseException) -> StorageError:
        return StorageError(f"object storage {self.endpoint} bucket {self.bucket}: {what} "
                            f"failed: {_describe(e)}")

    # ------------------------------------------------------------------ bucket
    def ensure_bucket(self) -> None:
        """Create the bucket when it does not exist (once per process when it answers)."""
        if self._bucket_ok:
            return
        try:
            self._client.head_bucket(Bucket=self.bucket)
        except botocore.exceptions.ClientError as e:
            if not _not_found(e):
                raise self._fail("checking the bucket", e) from None
            try:
                self._client.create_bucket(Bucket=self.bucket)
                log.info("created bucket %s on %s", self.bucket, self.endpoint)
            except botocore.exceptions.ClientError as e2:
                code = str(e2.response.get("Error", {}).get("Code", ""))
                if code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                    raise self._fail("creating the bucket", e2) from None
            except botocore.exceptions.BotoCoreError as e2:
                raise self._fail("creating the bucket", e2) from None
        except botocore.exceptions.BotoCoreError as e:
            raise self._fail("checking the bucket", e) from None
        self._bucket_ok = True

    def status(self) -> dict[str, Any]:
        """``{reachable, error}`` for the status routes (one HEAD of the bucket)."""
        try:
            self._client.head_bucket(Bucket=self.bucket)
            return {"reachable": True, "error": None}
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
            if _not_found(e):  # reachable; the bucket is created on the first backup
                return {"reachable": True, "error": None, "bucket_exists": False}
            return {"reachable": False, "error": _describe(e)}

    # ------------------------------------------------------------------ objects
    def put_json(self, key: str, doc: Any) -> None:
        body = json.dumps(doc, separators=(",", ":"), default=str).encode()
        try:
            self._client.put_object(Bucket=self.bucket, Key=key, Body=body,
                                    ContentType="application/json")
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
            raise self._fail(f"writing {key}", e) from None

    def get_json(self, key: str) -> Any | None:
        """The JSON object at ``key``; None when there is none."""
        try:
            body = self._client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
            if _not_found(e):
                return None
            raise self._fail(f"reading {key}", e) from None
        try:
            return json.loads(body)
        except ValueError:
            raise StorageError(f"{key} in bucket {self.bucket} is not JSON") from None

    def list_keys(self, prefix: str) -> list[str]:
        keys: list[str] = []
        token: str | None = None
        try:
            while True:
                kw: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
                if token:
                    kw["ContinuationToken"] = token
                page = self._client.list_objects_v2(**kw)
                keys += [o["Key"] for o in page.get("Contents", [])]
                if not page.get("IsTruncated"):
                    return keys
                token = page.get("NextContinuationToken")
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
            if _not_found(e):
                return []
            raise self._fail(f"listing {prefix}", e) from None

    def size(self, key: str) -> int | None:
        """The object's size in bytes; None when there is none."""
        try:
            return int(self._client.head_object(Bucket=self.bucket, Key=key)["ContentLength"])
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
            if _not_found(e):
                return None
            raise self._fail(f"reading {key}", e) from None

    def delete(self, key: str) -> None:
        try:
            self._client.delete_object(Bucket=self.bucket, Key=key)
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
            raise self._fail(f"deleting {key}", e) from None

    def download(self, key: str, path: Path,
                 progress: Callable[[int], None] | None = None) -> int:
        """Stream the object at ``key`` into ``path``; returns the bytes written."""
        done = 0
        try:
            body = self._client.get_object(Bucket=self.bucket, Key=key)["Body"]
            with open(path, "wb") as f:
                for chunk in body.iter_chunks(READ_CHUNK):
                    f.write(chunk)
                    done += len(chunk)
                    if progress is not None:
                        progress(done)
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
            raise self._fail(f"downloading {key}", e) from None
        return done

    def multipart(self, key: str, content_type: str = "application/gzip") -> MultipartWriter:
        """A new multipart upload of ``key`` (see :class:`MultipartWriter`)."""
        try:
            up = self._client.create_multipart_upload(Bucket=self.bucket, Key=key,
                                                      ContentType=content_type)
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
            raise self._fail(f"starting the upload of {key}", e) from None
        return MultipartWriter(self, key, str(up["UploadId"]))


class MultipartWriter:
    """Bytes written in order become parts of :data:`PART_SIZE`; :meth:`complete` sends the
    last part and assembles the object, :meth:`abort` drops everything sent."""

    def __init__(self, store: ObjectStore, key: str, upload_id: str) -> None:
        self.store = store
        self.key = key
        self.upload_id = upload_id
        self.parts: list[dict[str, Any]] = []
        self.sent = 0
        self._buf = bytearray()
        self._open = True

    def write(self, data: bytes) -> None:
        """Buffer ``data``; full parts are uploaded at once (blocking)."""
        self._buf += data
        while len(self._buf) >= PART_SIZE:
            part = bytes(self._buf[:PART_SIZE])
            del self._buf[:PART_SIZE]
            self._send(part)

    def _send(self, data: bytes) -> None:
        n = len(self.parts) + 1
        try:
            r = self.store._client.upload_part(Bucket=self.store.bucket, Key=self.key,
                                               PartNumber=n, UploadId=self.upload_id,
                                               Body=data)
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
            raise self.store._fail(f"uploading part {n} of {self.key}", e) from None
        self.parts.append({"PartNumber": n, "ETag": r["ETag"]})
        self.sent += len(data)

    def complete(self) -> int:
        """Send what is buffered and assemble the object; returns its size in bytes."""
        if self._buf or not self.parts:
            self._send(bytes(self._buf))
            self._buf.clear()
        try:
            self.store._client.complete_multipart_upload(
                Bucket=self.store.bucket, Key=self.key, UploadId=self.upload_id,
                MultipartUpload={"Parts": self.parts})
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
            raise self.store._fail(f"completing the upload of {self.key}", e) from None
        self._open = False
        return self.sent

    def abort(self) -> None:
        """Drop the upload (best effort: the server may be the reason we abort)."""
        if not self._open:
            return
        self._open = False
        try:
            self.store._client.abort_multipart_upload(Bucket=self.store.bucket, Key=self.key,
                                                      UploadId=self.upload_id)
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
            log.warning("aborting the upload of %s failed: %s", self.key, _describe(e))
