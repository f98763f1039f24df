"""Direct checkpoints: the sandbox moves the bytes, the control plane decides and checks.

When the blobs backend signs URLs (:func:`hangar.blobs.signing.url_signer`) and the sandboxes
backend's sandboxes reach the object store, a format-2 checkpoint's chunks, packs and manifest
are sealed inside the sandbox (:mod:`hangar.agent.direct`) and uploaded there, and a restore
downloads them there; no checkpoint byte passes through the control plane.

- **The grant** (:class:`Grant`) is what the control plane hands the sandbox's script on its
  standard input, read by hangar's uid only: the new checkpoint's data key (wrapped by the keys
  port on the record, as for any checkpoint), one create-only signed PUT per object it may write
  (:data:`GRANTED_PUTS` pack keys it named, valid for the script's budget), and the *source* to reuse
  (its data key, the key of its manifest, and a signed GET per pack it refers to). A restore's
  grant is a source alone.
- **The answer** (:class:`Answer`) says which granted objects were written, each with its size
  and MD5, where the manifest is, and which packs it refers to. :func:`check_answer` accepts it
  only when every written object is one it granted and is in the bucket with that size and MD5
  (:meth:`~hangar.blobs.signing.SignsUrls.stat`: metadata, no bytes), the manifest is among
  them, and every pack referred to is one just written or one the source refers to; anything
  else and nothing is recorded (and every granted key is deleted).
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pydantic import BaseModel, ConfigDict, Field

from hangar.blobs.signing import SignedRequest, SignsUrls
from hangar.checkpoints.chunks import pack_key
from hangar.checkpoints.parts import CheckpointParts, stored_at
from hangar.errors import BlobNotFound, CheckpointError
from hangar.models import Checkpoint, CheckpointPart

GRANTED_PUTS = 16
"""Objects a take may write: its packs and the manifest's root. Few, since each is one
signature (on Cloud Run, one call of the IAM API): the sandbox fills fewer, larger packs."""
_SIGNING_THREADS = 8
URL_MARGIN = 120
"""A signed URL is valid for the script's whole budget (HANGAR_CHECKPOINT_TIMEOUT_SECONDS) and
this much more: minutes, never days."""


def url_seconds(timeout: float) -> int:
    """How long the URLs of a take or restore with ``timeout`` seconds are valid."""
    return min(int(timeout) + URL_MARGIN, 7 * 24 * 3600)
MANIFEST_PART = "manifest"


class Request(BaseModel):
    """A signed request as the sandbox sends it: these headers, exactly."""

    model_config = ConfigDict(extra="forbid")

    method: str
    url: str
    headers: dict[str, str] = Field(default_factory=dict)

    @classmethod
    def of(cls, signed: SignedRequest) -> Request:
        return cls(method=signed.method, url=signed.url, headers=dict(signed.headers))


class Put(Request):
    key: str


class SourceGrant(BaseModel):
    """A format-2 checkpoint the sandbox may read: to reuse its chunks, or to restore it."""

    model_config = ConfigDict(extra="forbid")

    session_id: str
    checkpoint_id: str
    data_key: str = Field(description="base64: the checkpoint's data key, unwrapped")
    root: str = Field(description="the blob key of its manifest part")
    root_size: int = Field(ge=0, description="its manifest part's plaintext bytes (the record's)")
    root_sha256: str = Field(description="their SHA-256 (the record's): checked before use")
    gets: dict[str, Request] = Field(description="a signed GET per pack it refers to, by key")


class Grant(BaseModel):
    """What a direct take may write (``puts``, in the order it writes) and reuse (``source``)."""

    model_config = ConfigDict(extra="forbid")

    session_id: str
    checkpoint_id: str
    data_key: str
    puts: list[Put]
    source: SourceGrant | None = None


class WrittenObject(BaseModel):
    model_config = ConfigDict(extra="forbid")

    size: int = Field(ge=0)
    md5: str


class RootWritten(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str
    size: int = Field(ge=0)
    stored_size: int = Field(ge=0)
    sha256: str


class Answer(BaseModel):
    """What a direct take says it wrote (the rest of its manifest line is format 1's)."""

    model_config = ConfigDict(extra="ignore")

    direct: bool
    root: RootWritten
    packs: list[str]
    objects: dict[str, WrittenObject]
    written: int = Field(ge=0)


def _b64(key: bytes) -> str:
    return base64.b64encode(key).decode()


def grant_source(
    signer: SignsUrls, parts: CheckpointParts, checkpoint: Checkpoint, seconds: int
) -> SourceGrant:
    """Read access to a format-2 ``checkpoint``: its data key (unwrapped here: the keys port
    never reaches the sandbox) and a signed GET per pack. DecryptionFailed when the key does
    not unwrap."""
    part = checkpoint.part(MANIFEST_PART)
    if checkpoint.format != 2 or part is None:
        raise CheckpointError(f"checkpoint {checkpoint.id} is not a format-2 checkpoint")
    root = stored_at(checkpoint, part)
    keys = sorted({root, *checkpoint.packs})
    return SourceGrant(
        session_id=checkpoint.session_id,
        checkpoint_id=checkpoint.id,
        data_key=_b64(parts.data_key(checkpoint)),
        root=root,
        root_size=part.size,
        root_sha256=part.sha256,
        gets=dict(zip(keys, _signed(lambda key: signer.sign_get(key, seconds), keys))),
    )


def grant_take(
    signer: SignsUrls, session_id: str, checkpoint_id: str, data_key: bytes,
    source: SourceGrant | None, seconds: int,
) -> Grant:  # fmt: skip
    """A take's grant: :data:`GRANTED_PUTS` create-only PUTs to pack keys named here."""
    keys = [pack_key(session_id) for _ in range(GRANTED_PUTS)]
    signed = _signed(lambda key: signer.sign_put(key, seconds), keys)
    puts = [Put(key=key, **request.model_dump()) for key, request in zip(keys, signed)]
    return Grant(session_id=session_id, checkpoint_id=checkpoint_id, data_key=_b64(data_key),
                 puts=puts, source=source)  # fmt: skip


def _signed(sign: Callable[[str], SignedRequest], keys: list[str]) -> list[Request]:
    """``sign`` of each of ``keys``, several at once (a signature may be a network call)."""
    with ThreadPoolExecutor(min(_SIGNING_THREADS, max(1, len(keys)))) as pool:
        return [Request.of(signed) for signed in pool.map(sign, keys)]


def owner_of(pack: str) -> str | None:
    """The session owning the pack at blob key ``pack`` (``sessions/<owner>/packs/...``)."""
    bits = pack.split("/")
    return bits[1] if len(bits) == 4 and bits[0] == "sessions" and bits[2] == "packs" else None


def check_answer(
    signer: SignsUrls, grant: Grant, answer: Answer, source: Checkpoint | None
) -> dict[str, object]:
    """The record's fields for a direct take that said ``answer``: CheckpointError unless it
    holds (see the module's contract)."""
    granted = {put.key for put in grant.puts}
    stray = sorted(set(answer.objects) - granted)
    if stray:
        raise CheckpointError(f"the sandbox says it wrote objects it was not granted: {stray[:3]}")
    if answer.root.key not in answer.objects:
        raise CheckpointError("the sandbox's manifest is not among the objects it wrote")
    for key, said in answer.objects.items():
        try:
            found = signer.stat(key)
        except BlobNotFound:
            raise CheckpointError(f"object {key} the sandbox says it wrote is not there") from None
        if found.size != said.size or found.md5 != said.md5.lower():
            raise CheckpointError(f"object {key} is not what the sandbox says it wrote "
                                  f"({found.size} bytes, md5 {found.md5}; it said {said.size}, "
                                  f"{said.md5})")  # fmt: skip
    if answer.objects[answer.root.key].size != answer.root.stored_size:
        raise CheckpointError("the sandbox's manifest is not the size it says")
    allowed = set(answer.objects) | set(source.packs if source is not None else ())
    packs = set(answer.packs) | {answer.root.key}
    if packs - allowed:
        raise CheckpointError(f"the sandbox's manifest refers to packs it may not: "
                              f"{sorted(packs - allowed)[:3]}")  # fmt: skip
    owners = {owner_of(pack) for pack in packs}
    if None in owners:
        raise CheckpointError("the sandbox's manifest refers to a pack outside any session")
    written = sum(o.size for k, o in answer.objects.items() if k != answer.root.key)
    if written != answer.written:
        raise CheckpointError("the sandbox's written bytes do not add up")
    root = answer.root
    return {
        "format": 2,
        "parts": [CheckpointPart(name=MANIFEST_PART, size=root.size, stored_size=root.stored_size,
                                 sha256=root.sha256, key=root.key)],  # fmt: skip
        "packs": sorted(packs),
        "uses": sorted({grant.session_id, *(o for o in owners if o is not None)}),
        "written": written,
        "source": source.id if source is not None else None,
        "source_session": source.session_id if source is not None else None,
    }

