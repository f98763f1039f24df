"""Uploads: context items too large for one request body, sent first in parts.

Cloud Run caps a request at 32 MiB and base64 adds a third, so a 40 MB bundle cannot ride in a
``new`` or ``send``. Instead::

    POST /api/uploads {kind}                 -> {upload_id, part_mb, max_bytes, expires_at}
    PUT  /api/uploads/{id}/parts/{n}         the raw bytes of part n (from 1), each at most
                                             part_mb MiB; sealed into blobs as they stream in
    POST /api/uploads/{id}/complete {sha256} the whole checked against its hash and the limit

and a context item then names its ``upload_id``. Everything lives in blobs under
``uploads/<id>/``: ``meta.json`` (the :class:`Upload`, with its data key wrapped) and
``parts/<n>``, each part sealed under the upload's data key with its own key as associated
data. An upload that is not used within ``HANGAR_EXCHANGE_UPLOAD_EXPIRY_MINUTES`` (an hour) is
gone: reading it answers UploadNotFound and the next upload's start sweeps it away. Using one
copies its bytes under the turn's context key, and the upload is then deleted.

Bounds. Part ``n`` holds the bytes from ``(n - 1) * part_bytes`` on (parts are cut at the part
size, the last one shorter), so it may carry at most ``max_bytes - (n - 1) * part_bytes``: no
part, sent in any order or at the same time as others, takes the stored whole past the item's
limit. A token holds at most ``HANGAR_EXCHANGE_MAX_OPEN_UPLOADS`` uploads at once, counting
every upload it began that is neither used nor expired, complete or not (a complete upload
keeps its bytes until used, so leaving those out would bound nothing); one more is
TooManyUploads. Every start sweeps the expired ones first, so what uploads hold in blobs is at
most tokens x that cap x the largest item (``HANGAR_EXCHANGE_MAX_BUNDLE_MB``): 20 x 50 MiB,
about 1 GiB, per token by default. Only admin tokens reach ``/api/uploads`` (a terminal ticket
cannot), and hangar makes one, so that is the bound in total too; no cap over all tokens is
kept, which would let one token's uploads refuse every other's.
"""

from __future__ import annotations

import base64
import math
import re
import secrets
from collections.abc import Callable, Generator, Iterable, Iterator
from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field

from hangar.blobs import Blobs, Tally
from hangar.config import Settings
from hangar.errors import BlobNotFound, InvalidContext, InvalidInput, PayloadTooLarge
from hangar.errors import TooManyUploads, UploadNotFound
from hangar.keys import Keys
from hangar.keys.envelope import new_data_key, seal, unseal
from hangar.models import ContextKind, utcnow

_ID = re.compile(r"^upl-[0-9a-f]{32}$")


class Upload(BaseModel):
    """An upload's record (``uploads/<id>/meta.json``)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    kind: ContextKind
    max_bytes: int = Field(description="the item's limit: the whole may not pass it")
    part_bytes: int = Field(description="the most one part may carry")
    created_at: datetime = Field(default_factory=utcnow)
    expires_at: datetime
    key: str = Field(description="its data key, wrapped (base64)")
    token_id: str | None = Field(
        None, description="the token that began it, whose uploads it counts among (None: "
        "begun before uploads were counted)")
    complete: bool = False
    parts: int = 0
    size: int = 0
    sha256: str | None = None

    @property
    def max_parts(self) -> int:
        return max(1, math.ceil(self.max_bytes / self.part_bytes))

    def part_limit(self, n: int) -> int:
        """The most part ``n`` may carry: a part, the rest of the item's limit for the last."""
        return min(self.part_bytes, self.max_bytes - (n - 1) * self.part_bytes)


def item_limit(settings: Settings, kind: ContextKind) -> int:
    """The most bytes an item of ``kind`` may carry (a turn's files share theirs)."""
    if kind is ContextKind.PATCH:
        return settings.max_patch_bytes
    if kind is ContextKind.BUNDLE:
        return settings.max_bundle_bytes
    return settings.max_context_bytes


def _meta_key(upload_id: str) -> str:
    return f"uploads/{upload_id}/meta.json"


def _part_key(upload_id: str, n: int) -> str:
    return f"uploads/{upload_id}/parts/{n}"


class Uploads:
    """Starts, fills, completes, reads and deletes uploads."""

    def __init__(self, settings: Settings, blobs: Blobs, keys: Keys) -> None:
        self.settings = settings
        self.blobs = blobs
        self.keys = keys

    def begin(self, kind: ContextKind, *, token_id: str) -> Upload:
        """A new upload for an item of ``kind`` (any but a url), counted among the uploads of
        the token ``token_id``; sweeps expired ones first. TooManyUploads when that token holds
        ``exchange_max_open_uploads`` already (nothing is made). Two starts racing for a
        token's last place never both stay: each counts again after saving itself and, over
        the cap, takes itself back (both may then be refused)."""
        if kind is ContextKind.URL:
            raise InvalidInput("a url is not uploaded: give it in the context item",
                               field="kind")  # fmt: skip
        held = self._held(token_id)
        if len(held) >= self.settings.exchange_max_open_uploads:
            raise self._too_many(held)
        part = min(self.settings.exchange_upload_part_mb, self.settings.max_body_mb)
        upload = Upload(
            id=f"upl-{secrets.token_hex(16)}", kind=kind, max_bytes=item_limit(self.settings, kind),
            part_bytes=int(part * 2**20), key=base64.b64encode(self.keys.wrap(new_data_key())).decode(),
            expires_at=utcnow() + timedelta(minutes=self.settings.exchange_upload_expiry_minutes),
            token_id=token_id,
        )  # fmt: skip
        self._save(upload)
        held = self._held(token_id)
        if len(held) > self.settings.exchange_max_open_uploads:
            self.delete(upload.id)
            raise self._too_many([u for u in held if u.id != upload.id])
        return upload

    def _held(self, token_id: str) -> list[Upload]:
        """The uploads the token holds (neither used nor expired), sweeping expired ones."""
        return [u for u in self._live() if u.token_id == token_id]

    def _too_many(self, held: list[Upload]) -> TooManyUploads:
        cap = self.settings.exchange_max_open_uploads
        first = min((u.expires_at for u in held), default=utcnow())
        wait = max(1, math.ceil((first - utcnow()).total_seconds()))
        return TooManyUploads(
            f"this token holds {len(held)} uploads, the most it may (HANGAR_EXCHANGE_MAX_OPEN_"
            f"UPLOADS={cap}): name one in a request, or wait for one to expire (the first in "
            f"{wait} s)", limit=cap, retry_after=wait,
        )  # fmt: skip

    def get(self, upload_id: str) -> Upload:
        """The upload; UploadNotFound when there is none, or it expired (it is then removed)."""
        if not _ID.match(upload_id):
            raise UploadNotFound(f"upload {upload_id[:60]!r} is not an upload id",
                                 upload_id=upload_id[:60])  # fmt: skip
        try:
            upload = Upload.model_validate_json(self.blobs.get(_meta_key(upload_id)))
        except BlobNotFound:
            raise UploadNotFound(f"no upload {upload_id} (uploads expire after "
                                 f"{self.settings.exchange_upload_expiry_minutes:g} minutes)",
                                 upload_id=upload_id) from None  # fmt: skip
        if upload.expires_at <= utcnow():
            self.delete(upload_id)
            raise UploadNotFound(f"upload {upload_id} expired at {upload.expires_at:%H:%M:%S} UTC",
                                 upload_id=upload_id)  # fmt: skip
        return upload

    def put_part(self, upload_id: str, n: int, chunks: Iterable[bytes]) -> int:
        """Seal and store part ``n`` as it streams in (a part sent again replaces it); returns
        its size. PayloadTooLarge past the part size, or past what the item's limit leaves for
        part ``n`` (:meth:`Upload.part_limit`), refused as soon as the stream passes it: the
        part stored before, if any, stays. InvalidInput for a number past the parts the limit
        allows, or an upload already complete."""
        upload = self.get(upload_id)
        if upload.complete:
            raise InvalidInput(f"upload {upload_id} is complete; start a new one", field="upload")
        if not 1 <= n <= upload.max_parts:
            raise InvalidInput(f"part must be from 1 to {upload.max_parts} (parts of "
                               f"{upload.part_bytes} bytes up to {upload.max_bytes}), not {n}",
                               field="part")  # fmt: skip
        size, limit = 0, upload.part_limit(n)

        def counted() -> Iterator[bytes]:
            nonlocal size
            for chunk in chunks:
                size += len(chunk)
                if size > upload.part_bytes:
                    raise PayloadTooLarge(f"part {n} is over the part size of "
                                          f"{upload.part_bytes} bytes", limit=upload.part_bytes)
                if size > limit:
                    raise PayloadTooLarge(
                        f"part {n} would take the upload past its max_bytes of "
                        f"{upload.max_bytes}: part {n} starts at byte {(n - 1) * upload.part_bytes}"
                        f" (parts are cut at {upload.part_bytes} bytes), so it may carry {limit}",
                        limit=limit, max_bytes=upload.max_bytes,
                    )  # fmt: skip
                yield chunk

        key = _part_key(upload_id, n)
        self.blobs.put(key, seal(self._data_key(upload), key.encode(), counted()))
        return size

    def complete(self, upload_id: str, sha256: str) -> Upload:
        """Check the parts (1 to the last, none missing) against ``sha256`` and the item's
        limit, and mark the upload complete. InvalidContext when they do not match; the parts
        stay, so a part sent wrong can be sent again."""
        upload = self.get(upload_id)
        if upload.complete:
            return upload
        stored = {int(k.rsplit("/", 1)[1]) for k in self.blobs.list(f"uploads/{upload_id}/parts/")}
        count = max(stored, default=0)
        missing = sorted(set(range(1, count + 1)) - stored)
        if not count or missing:
            raise InvalidContext(f"upload {upload_id}: parts missing: "
                                 f"{', '.join(map(str, missing[:10])) or 'all'}",
                                 field="parts")  # fmt: skip
        tally = Tally()
        for _ in tally.through(self._parts(upload, count)):
            pass
        size = tally.size
        if size > upload.max_bytes:
            raise InvalidContext(f"upload {upload_id}: {size} bytes, over the {upload.kind.value} "
                                 f"limit of {upload.max_bytes} bytes", field="size")  # fmt: skip
        if tally.sha256 != sha256.strip().lower():
            raise InvalidContext(f"upload {upload_id}: the parts' sha256 is {tally.sha256}, "
                                 f"not {sha256.strip()[:64]}", field="sha256")  # fmt: skip
        done = upload.model_copy(update={"complete": True, "parts": count, "size": size,
                                         "sha256": tally.sha256})  # fmt: skip
        self._save(done)
        return done

    def complete_one(self, upload_id: str, refuse: Callable[[str], InvalidContext]) -> Upload:
        """The upload a context item names, which must be complete (``refuse`` says why not)."""
        try:
            upload = self.get(upload_id)
        except UploadNotFound as exc:
            raise refuse(exc.message) from None
        if not upload.complete:
            raise refuse(f"upload {upload_id} is not complete (POST /api/uploads/{upload_id}/"
                         "complete)")  # fmt: skip
        return upload

    def read(self, upload: Upload) -> Iterator[bytes]:
        """Yield a complete upload's bytes; InvalidContext when they no longer match."""
        tally = Tally()
        yield from tally.through(self._parts(upload, upload.parts))
        if tally.sha256 != upload.sha256:
            raise InvalidContext(f"upload {upload.id} changed after it was completed")

    def head(self, upload: Upload) -> bytes:
        """The first bytes of a complete upload (its first sealed chunk)."""
        chunks = self._parts(upload, 1)
        try:
            return next(chunks, b"")
        finally:
            chunks.close()

    def delete(self, upload_id: str) -> None:
        for key in self.blobs.list(f"uploads/{upload_id}/"):
            self.blobs.delete(key)

    def sweep(self) -> list[str]:
        """Delete every expired upload; returns their ids."""
        gone: list[str] = []
        self._live(gone)
        return gone

    def _live(self, gone: list[str] | None = None) -> list[Upload]:
        """Every upload neither used nor expired; the expired ones are deleted (their ids added
        to ``gone``)."""
        live = []
        for key in self.blobs.list("uploads/"):
            if not key.endswith("/meta.json"):
                continue
            upload_id = key.split("/")[1]
            try:
                live.append(self.get(upload_id))
            except UploadNotFound:
                if gone is not None:
                    gone.append(upload_id)
        return live

    def _parts(self, upload: Upload, count: int) -> Generator[bytes, None, None]:
        data_key = self._data_key(upload)
        for n in range(1, count + 1):
            key = _part_key(upload.id, n)
            with self.blobs.open(key) as stream:
                yield from unseal(data_key, key.encode(), stream)

    def _data_key(self, upload: Upload) -> bytes:
        return self.keys.unwrap(base64.b64decode(upload.key))

    def _save(self, upload: Upload) -> None:
        self.blobs.put(_meta_key(upload.id), upload.model_dump_json().encode())
