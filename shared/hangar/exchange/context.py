"""Context that comes with a turn's message (spec 004, In): checked when the request comes,
sealed into blobs before it is answered, and read back when the turn starts.

An item is ``{kind, name?, content?, encoding?, url?, base_commit?, upload_id?}``
(:class:`ContextItem`, the same on REST and MCP):

- ``text``, ``file``, ``log``, ``issue``, ``diff``: ``content`` as text, or base64 with
  ``"encoding": "base64"``; written to ``$HANGAR_IO/in/<turn>/<name>``. A name is a relative
  path that stays inside ``in/<turn>/`` (``file`` needs one; the others default to
  ``<kind>-<i>.txt``). At most ``HANGAR_EXCHANGE_MAX_CONTEXT_MB`` of them a turn.
- ``url``: an http(s) URL, listed in the prompt.
- ``patch``: a ``git diff --binary``, applied as uncommitted changes before the turn (at most
  ``HANGAR_EXCHANGE_MAX_PATCH_MB``); ``bundle``: a git bundle and its ``base_commit``, fetched
  onto the work branch (at most ``HANGAR_EXCHANGE_MAX_BUNDLE_MB``). One of each a turn; both are
  put in place inside the sandbox (:mod:`hangar.exchange.intake`), never by the control plane.

Any item may name an ``upload_id`` (:mod:`hangar.exchange.uploads`) instead of carrying
``content``. Everything is checked before anything is stored: a refusal is one
:class:`~hangar.errors.InvalidContext` naming the item (``context.<i>``) and changes nothing.
Accepted items are sealed each under a data key of its own at
``sessions/<session>/context/<turn>-<request>/<i>`` (:func:`context_key`, also the associated
data), so
they survive the start-up ticks and a restart, and go with the session.
"""

from __future__ import annotations

import base64
import binascii
import re
import secrets
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from hangar.blobs import Blobs, Tally
from hangar.config import Settings
from hangar.errors import DecryptionFailed, InvalidContext
from hangar.exchange.uploads import Upload, Uploads, item_limit
from hangar.keys import Keys
from hangar.keys.envelope import new_data_key, seal, unseal
from hangar.models import ContextKind as K, ContextRef

FILE_KINDS = frozenset({K.TEXT, K.FILE, K.LOG, K.ISSUE, K.DIFF})
"""Kinds written to ``$HANGAR_IO/in/<turn>/``."""
BUNDLE_HEADERS = (b"# v2 git bundle\n", b"# v3 git bundle\n")
_COMMIT = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
_DIFF_HEADER = re.compile(rb"^(?:diff --git |--- \S|\+\+\+ \S|@@ )", re.M)
MAX_NAME = 255
Refuse = Callable[[str], InvalidContext]
MAX_URL = 2048


class ContextItem(BaseModel):
    """One context item on the wire (REST and MCP alike)."""

    model_config = ConfigDict(extra="forbid")

    kind: K = Field(description="text, file, log, issue, diff, url, patch or bundle")
    name: str | None = Field(None, description="the file name under $HANGAR_IO/in/<turn>/ "
                             "(a relative path; file needs one)")  # fmt: skip
    content: str | None = Field(None, description="the item, as text or base64 (encoding)")
    encoding: Literal["utf-8", "base64"] | None = Field(
        None, description="base64 for binary content (bundles always are); default utf-8")
    url: str | None = Field(None, description="url: the link listed in the prompt")
    base_commit: str | None = Field(None, description="bundle: the commit it builds on, which "
                                    "must be on the remote")  # fmt: skip
    upload_id: str | None = Field(None, description="an upload made with POST /api/uploads, "
                                  "instead of content")  # fmt: skip


def context_key(session_id: str, n: int, batch: str, index: int) -> str:
    """Where item ``index`` of the request ``batch`` asking for turn ``n`` is stored (also its
    associated data). Two requests racing for the same turn store apart: the loser's items
    are removed without touching the winner's."""
    return f"sessions/{session_id}/context/{n}-{batch}/{index}"


@dataclass
class _Checked:
    ref: ContextRef
    data: bytes | None = None
    upload: Upload | None = None


@dataclass(frozen=True)
class Accepted:
    """Items sealed for a turn: ``refs`` go on the turn and its start; ``uploads`` are used up
    once the request has been carried out (:meth:`ContextStore.settle`)."""

    refs: list[ContextRef]
    uploads: list[str]


class ContextStore:
    """Checks, seals, reads and deletes the context of a session's turns."""

    def __init__(self, settings: Settings, blobs: Blobs, keys: Keys, uploads: Uploads) -> None:
        self.settings = settings
        self.blobs = blobs
        self.keys = keys
        self.uploads = uploads

    # -- accepting --------------------------------------------------------------------------

    def check(self, items: Sequence[ContextItem]) -> list[_Checked]:
        """Every item checked (InvalidContext for the first that is wrong); nothing stored."""
        limit = self.settings.exchange_max_context_items
        if len(items) > limit:
            raise InvalidContext(f"context: at most {limit} items a turn, not {len(items)}",
                                 field="context")  # fmt: skip
        checked = [self._check(i, item) for i, item in enumerate(items)]
        files = sum(c.ref.size for c in checked if c.ref.kind in FILE_KINDS)
        if files > self.settings.max_context_bytes:
            raise InvalidContext(
                f"context: the files come to {files} bytes, over the "
                f"{self.settings.exchange_max_context_mb:g} MiB a turn "
                "(HANGAR_EXCHANGE_MAX_CONTEXT_MB)", field="context")  # fmt: skip
        names = [c.ref.name for c in checked if c.ref.kind in FILE_KINDS]
        for kind in (K.PATCH, K.BUNDLE):
            if sum(c.ref.kind is kind for c in checked) > 1:
                raise InvalidContext(f"context: at most one {kind.value} a turn", field="context")
        seen: set[str] = set()
        for name in names:
            assert name is not None
            if name.lower() in seen:
                raise InvalidContext(f"context: two items are named {name!r}", field="context")
            seen.add(name.lower())
        return checked

    def accept(self, session_id: str, n: int, items: Sequence[ContextItem]) -> Accepted:
        """Check every item, then seal each (an upload's bytes are copied under the turn's
        key); a failure while sealing removes what was stored. Nothing is stored for no
        items."""
        checked = self.check(items)
        batch = secrets.token_hex(4)
        refs: list[ContextRef] = []
        try:
            for i, c in enumerate(checked):
                refs.append(self._seal(context_key(session_id, n, batch, i), c))
        except BaseException:
            self.release(Accepted(refs, []))
            raise
        return Accepted(refs, [c.upload.id for c in checked if c.upload is not None])

    def settle(self, accepted: Accepted) -> None:
        """The request was carried out: its uploads are used up."""
        for upload_id in accepted.uploads:
            self.uploads.delete(upload_id)

    def release(self, accepted: Accepted) -> None:
        """Remove what a request sealed (it failed afterwards); its uploads stay usable."""
        for ref in accepted.refs:
            if ref.blob:
                self.blobs.delete(ref.blob)

    def delete_all(self, session_id: str) -> None:
        """Remove every turn's items (the session is deleted)."""
        for key in self.blobs.list(f"sessions/{session_id}/context/"):
            self.blobs.delete(key)

    # -- reading ----------------------------------------------------------------------------

    def read(self, ref: ContextRef) -> Iterator[bytes]:
        """Yield a stored item's bytes; DecryptionFailed when they were altered (checked after
        the last chunk)."""
        assert ref.key is not None and ref.blob is not None
        key = ref.blob
        data_key = self.keys.unwrap(base64.b64decode(ref.key))
        tally = Tally()
        with self.blobs.open(key) as stream:
            yield from tally.through(unseal(data_key, key.encode(), stream))
        if tally.sha256 != ref.sha256:
            raise DecryptionFailed(f"context item {key} does not match its hash")

    def read_all(self, ref: ContextRef) -> bytes:
        return b"".join(self.read(ref))

    # -- the checks -------------------------------------------------------------------------

    def _check(self, i: int, item: ContextItem) -> _Checked:
        where = f"context.{i}"

        def refuse(why: str) -> InvalidContext:
            return InvalidContext(f"{where} ({item.kind.value}): {why}", field=where)

        if item.kind is K.URL:
            return _Checked(ContextRef(kind=K.URL, url=_check_url(item, refuse)))
        if item.url is not None:
            raise refuse("only a url item has a url")
        if item.base_commit is not None and item.kind is not K.BUNDLE:
            raise refuse("only a bundle has a base_commit")
        if (item.content is None) == (item.upload_id is None):
            raise refuse("give content or upload_id (one of them)")
        limit = item_limit(self.settings, item.kind)
        data, upload, size = None, None, 0
        if item.upload_id is not None:
            if item.encoding is not None:
                raise refuse("an upload has no encoding: its bytes are the item")
            upload = self.uploads.complete_one(item.upload_id, refuse)
            if upload.kind is not item.kind:
                raise refuse(f"upload {upload.id} was made for a {upload.kind.value}")
            size, head = upload.size, self.uploads.head(upload)
        else:
            assert item.content is not None
            data = _decode(item, refuse)
            size, head = len(data), data[: 1 << 20]
        if size > limit:
            raise refuse(f"{size} bytes, over its limit of {limit} bytes")
        name = None
        if item.kind in FILE_KINDS:
            if item.name is None and item.kind is K.FILE:
                raise refuse("a file needs a name")
            name = _check_name(item.name or f"{item.kind.value}-{i + 1}.txt", refuse)
        elif item.name is not None:
            raise refuse("only files have a name")
        if item.kind is K.PATCH and not _DIFF_HEADER.search(head):
            raise refuse("not a diff (git diff --binary makes one)")
        base = None
        if item.kind is K.BUNDLE:
            if not head.startswith(BUNDLE_HEADERS):
                raise refuse("not a git bundle (git bundle create makes one)")
            base = (item.base_commit or "").strip().lower()
            if not _COMMIT.match(base):
                raise refuse("base_commit must be a full commit id (git merge-base HEAD "
                             "@{upstream})")  # fmt: skip
        ref = ContextRef(kind=item.kind, name=name, base_commit=base, size=size)
        return _Checked(ref, data=data, upload=upload)

    def _seal(self, key: str, c: _Checked) -> ContextRef:
        if c.ref.kind is K.URL:
            return c.ref
        data_key = new_data_key()
        if c.data is not None:
            chunks: Iterable[bytes] = [c.data]
        else:
            assert c.upload is not None
            chunks = self.uploads.read(c.upload)
        tally = Tally()
        self.blobs.put(key, seal(data_key, key.encode(), tally.through(chunks)))
        wrapped = base64.b64encode(self.keys.wrap(data_key)).decode()
        return c.ref.model_copy(update={"key": wrapped, "sha256": tally.sha256,
                                        "size": tally.size, "blob": key})  # fmt: skip


def _decode(item: ContextItem, refuse: Refuse) -> bytes:
    assert item.content is not None
    binary = item.kind is K.BUNDLE
    if item.encoding == "base64" or binary:
        if item.encoding != "base64":
            raise refuse('a bundle is binary: send it with "encoding": "base64"')
        try:
            return base64.b64decode(item.content, validate=True)
        except (binascii.Error, ValueError):
            raise refuse("content is not valid base64") from None
    return item.content.encode()


def _check_name(name: str, refuse: Refuse) -> str:
    """A relative path inside ``in/<turn>/``: no empty, ``.`` or ``..`` part, no leading
    slash or backslash, no control characters, each part at most MAX_NAME bytes."""
    parts = name.split("/")
    if name.startswith("/") or "\\" in name or any(ord(ch) < 32 for ch in name):
        raise refuse(f"name {name[:80]!r} must be a plain relative path")
    if any(p in ("", ".", "..") for p in parts) or len(parts) > 8:
        raise refuse(f"name {name[:80]!r} must stay inside in/<turn>/ (no '..' or empty parts)")
    if any(len(p.encode()) > MAX_NAME for p in parts):
        raise refuse(f"name {name[:80]!r} has a part over {MAX_NAME} bytes")
    return name


def _check_url(item: ContextItem, refuse: Refuse) -> str:
    if item.content is not None or item.upload_id is not None or item.name is not None:
        raise refuse("a url item carries only its url")
    url = (item.url or "").strip()
    if not re.match(r"^https?://[^\s/]+\S*$", url) or len(url) > MAX_URL:
        raise refuse(f"url must be an http(s) URL of at most {MAX_URL} characters")
    return url
