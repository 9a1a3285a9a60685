"""Content-addressed blobs in a JetStream object-store bucket.

The output-store keeps chunk bytes here when its backend is `jetstream`. Each blob is one
object named by its sha256 and written as a single chunk message followed by its meta
message, so a writer killed half-way leaves at most an unnamed chunk message (which
`sweep_unnamed` purges on a later pass) and never a half-readable object.

Next to `tether_common.bus` this is the only module that imports nats: the object store needs the
JetStream context, and its errors leave here as `StoreError` (retryable) or, for a blob
that is not there, `NotFoundError`.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from nats.js import api as js_api
from nats.js.errors import NotFoundError as JsNotFoundError
from nats.js.object_store import ObjectStore

from tether_common.bus import Bus
from tether_common.errors import ErrorCode, NotFoundError, StoreError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BlobInfo:
    name: str
    size: int
    written_at: datetime | None
    nuid: str  # the subject suffix of the object's chunk message


@dataclass(slots=True)
class BlobBucket:
    """One object-store bucket on the service's own bus connection, opened on first use."""

    bus: Bus
    name: str
    replicas: int = 1
    create: bool = False  # only the backend that writes here declares the bucket
    max_bytes: int | None = None  # when full, writes fail (and results stay inline)
    _store: ObjectStore | None = field(default=None, init=False)
    _unnamed: set[str] = field(default_factory=set, init=False)

    @property
    def stream(self) -> str:
        return f"OBJ_{self.name}"

    async def open(self) -> ObjectStore:
        if self._store is not None:
            return self._store
        js = self.bus.jetstream
        try:
            try:
                self._store = await js.object_store(self.name)
            except JsNotFoundError:
                if not self.create:
                    raise NotFoundError(f"no JetStream object store '{self.name}'") from None
                config = js_api.ObjectStoreConfig(
                    description="Tether output chunks, named by sha256",
                    storage=js_api.StorageType.FILE,
                    replicas=self.replicas,
                    max_bytes=self.max_bytes or -1,
                )
                self._store = await js.create_object_store(self.name, config=config)
        except NotFoundError:
            raise
        except Exception as exc:
            raise StoreError(f"JetStream object store '{self.name}': {exc}") from exc
        return self._store

    async def exists(self, name: str) -> bool:
        try:
            store = await self.open()
        except NotFoundError:  # no bucket, no blob
            return False
        try:
            await store.get_info(name)
        except JsNotFoundError:
            return False
        except Exception as exc:
            raise StoreError(f"object store lookup of '{name}' failed: {exc}") from exc
        return True

    async def put(self, name: str, data: bytes) -> None:
        try:
            store = await self.open()
        except NotFoundError as exc:  # a failed write, not a missing thing the caller asked for
            raise StoreError(
                exc.message, code=ErrorCode.STORE_UNAVAILABLE, retryable=False
            ) from None
        # One chunk message per blob: nothing to reassemble, nothing half-written to see.
        meta = js_api.ObjectMeta(
            name=name, options=js_api.ObjectMetaOptions(max_chunk_size=max(len(data), 1))
        )
        try:
            await store.put(name, data, meta=meta)
        except Exception as exc:
            raise StoreError(f"object store write of '{name}' failed: {exc}") from exc

    async def get(self, name: str) -> bytes:
        store = await self.open()
        try:
            result = await store.get(name)
        except JsNotFoundError:
            raise NotFoundError(f"no object '{name}' in '{self.name}'") from None
        except Exception as exc:
            raise StoreError(f"object store read of '{name}' failed: {exc}") from exc
        return bytes(result.data or b"")

    async def delete(self, names: Iterable[str]) -> int:
        """Delete blobs; one already gone (or a bucket never made) is fine. Returns how
        many were there."""
        try:
            store = await self.open()
        except NotFoundError:
            return 0
        deleted = 0
        for name in names:
            try:
                await store.delete(name)
                deleted += 1
            except JsNotFoundError:
                pass
            except Exception as exc:
                raise StoreError(f"object store delete of '{name}' failed: {exc}") from exc
            # The library leaves a `deleted` marker per name; nothing reads it here.
            await self._purge(_meta_subject(self.name, name))
        return deleted

    async def list(self) -> list[BlobInfo]:
        store = await self.open()
        try:
            infos = await store.list(ignore_deletes=True)
        except JsNotFoundError:  # the library's answer for an empty bucket
            return []
        except Exception as exc:
            raise StoreError(f"object store listing failed: {exc}") from exc
        return [
            BlobInfo(i.name, i.size or 0, _parse_time(i.mtime), i.nuid) for i in infos if i.name
        ]

    async def sweep_unnamed(self, listed: Sequence[BlobInfo] | None = None) -> int:
        """Purge chunk messages no object names, if they were unnamed at the previous
        sweep too (a put in flight names its chunk within milliseconds). `listed` spares
        a second listing to a caller that has just made one. Returns how many subjects
        were purged."""
        blobs = await self.list() if listed is None else listed
        named = {_chunk_subject(self.name, b.nuid) for b in blobs}
        try:
            state = await self.bus.jetstream.stream_info(
                self.stream, subjects_filter=_chunk_subject(self.name, ">")
            )
        except Exception as exc:
            raise StoreError(f"object store stream info failed: {exc}") from exc
        unnamed = set(state.state.subjects or {}) - named
        stale, self._unnamed = unnamed & self._unnamed, unnamed - self._unnamed
        for subject in stale:
            await self._purge(subject)
        if stale:
            log.info("purged %d unnamed chunk subjects from %s", len(stale), self.stream)
        return len(stale)

    async def _purge(self, subject: str) -> None:
        try:
            await self.bus.jetstream.purge_stream(self.stream, subject=subject)
        except Exception as exc:
            raise StoreError(f"object store purge of '{subject}' failed: {exc}") from exc


def _chunk_subject(bucket: str, nuid: str) -> str:
    return f"$O.{bucket}.C.{nuid}"


def _meta_subject(bucket: str, name: str) -> str:
    return f"$O.{bucket}.M.{base64.urlsafe_b64encode(name.encode()).decode()}"


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
