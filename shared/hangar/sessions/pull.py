"""Code out (spec 004, Out): a session's newest checkpoint as what ``hangar session pull``
takes, with no git run by the control plane.

``GET /api/sessions/{ref}/pull`` answers an uncompressed tar stream of, in order:

- ``pull.json``: :class:`PullInfo` (the checkpoint, its head, base and branch, which members
  follow, what the patch is relative to, and warnings);
- ``repo.bundle``: the checkpoint's bundle, the commits from ``base`` to ``head`` (absent when
  the session made none);
- ``changes.patch``: the uncommitted changes: the checkpoint's session patch, ``base`` to the
  working tree with untracked files (``patch_base: "base"``), or, when that was too large to
  keep, its tracked changes from ``head`` alone (``patch_base: "head"``, with a warning).

Both were made by the checkpoint inside the sandbox; the stream is copied out of blobs as it is
unsealed. The client (:mod:`hangar.cli.localgit`) fetches the bundle into ``hangar/<name>``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, BinaryIO, Literal

from pydantic import BaseModel

from hangar.errors import NotFound
from hangar.models import Checkpoint, Session

if TYPE_CHECKING:
    from hangar.sessions.checkpoints import Checkpointer

MEDIA = "application/x-tar"
BLOCK = 512


class PullInfo(BaseModel):
    """``pull.json``: what the rest of the stream holds."""

    session: str
    checkpoint: str
    taken_at: datetime
    branch: str | None
    head: str
    base: str | None
    bundle: bool
    patch: bool
    patch_base: Literal["base", "head"]
    warnings: list[str]


@dataclass(frozen=True)
class Member:
    name: str
    size: int
    chunks: Callable[[], Iterator[bytes]]


@dataclass(frozen=True)
class PullAnswer:
    info: PullInfo
    members: list[Member]

    def tar(self) -> Iterator[bytes]:
        """The package as a tar stream (:data:`MEDIA`), members as they unseal."""
        import tarfile  # here, not at import: the api function's cold start never needs it

        info = self.info.model_dump_json().encode()
        members = [Member("pull.json", len(info), lambda: iter([info])), *self.members]
        for member in members:
            header = tarfile.TarInfo(member.name)
            header.size, header.mode, header.mtime = member.size, 0o644, int(
                self.info.taken_at.timestamp())  # fmt: skip
            yield header.tobuf(format=tarfile.PAX_FORMAT)
            written = 0
            for chunk in member.chunks():
                written += len(chunk)
                yield chunk
            if written != member.size:  # a tar cannot say so later: stop the stream short
                raise OSError(f"{member.name}: {written} bytes, not the {member.size} recorded")
            yield b"\0" * (-written % BLOCK)
        yield b"\0" * (2 * BLOCK)


def package(checkpointer: Checkpointer, session: Session, checkpoints: list[Checkpoint]) -> PullAnswer:
    """The newest checkpoint's commits and uncommitted changes; NotFound when the session has
    no checkpoint with its head, or its commits could not be kept (over the part cap)."""
    newest = next((c for c in reversed(checkpoints) if c.head), None)
    if newest is None:
        raise NotFound(f"session {session.name} has no checkpoint to pull yet", session=session.name)
    assert newest.head is not None
    warnings = list(newest.warnings)
    members: list[Member] = []
    bundle = newest.part("repo.bundle")
    if bundle is not None:
        members.append(_member(checkpointer, newest, "repo.bundle", "repo.bundle"))
    elif newest.base != newest.head:
        raise NotFound(f"session {session.name}'s newest checkpoint ({newest.id}) kept no "
                       "bundle of its commits: " + ("; ".join(w for w in warnings if "bundle" in w)
                                                    or "they are not recorded"),
                       session=session.name)  # fmt: skip
    patch_base: Literal["base", "head"] = "base"
    if newest.part("session.patch") is not None and newest.base:
        members.append(_member(checkpointer, newest, "session.patch", "changes.patch"))
    elif newest.part("wip.patch") is not None:
        patch_base = "head"
        members.append(_member(checkpointer, newest, "wip.patch", "changes.patch"))
        warnings.append("changes.patch holds the tracked files' changes only: the untracked "
                        "files did not fit the checkpoint's patch")  # fmt: skip
    info = PullInfo(session=session.name, checkpoint=newest.id, taken_at=newest.ts,
                    branch=newest.branch, head=newest.head, base=newest.base,
                    bundle=bundle is not None, patch=any(m.name == "changes.patch" for m in members),
                    patch_base=patch_base, warnings=warnings)  # fmt: skip
    return PullAnswer(info, members)


def _member(checkpointer: Checkpointer, checkpoint: Checkpoint, part: str, name: str) -> Member:
    recorded = checkpoint.part(part)
    assert recorded is not None
    return Member(name, recorded.size, lambda: checkpointer.parts.read(checkpoint, part))


def read_package(stream: BinaryIO) -> tuple[PullInfo, dict[str, bytes]]:
    """The client's side: ``pull.json`` and the members' bytes from a tar stream (members it
    does not know are ignored; nothing is written to disk)."""
    import tarfile

    info: PullInfo | None = None
    found: dict[str, bytes] = {}
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            if not member.isfile() or member.name not in ("pull.json", "repo.bundle",
                                                          "changes.patch"):  # fmt: skip
                continue
            extracted = tar.extractfile(member)
            assert extracted is not None
            data = extracted.read()
            if member.name == "pull.json":
                info = PullInfo.model_validate_json(data)
            else:
                found[member.name] = data
    if info is None:
        raise NotFound("the pull answer has no pull.json")
    return info, found
