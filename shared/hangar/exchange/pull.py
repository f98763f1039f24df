"""The pull archive (spec 004, Out): what ``GET /api/sessions/{ref}/pull`` answers and
``hangar session pull`` reads, the format both sides share.

An uncompressed tar stream (:data:`MEDIA`) of, in order:

- ``pull.json``: :class:`PullInfo` (the checkpoint, its head, base and branch, which members
  follow, what the patch is relative to, and warnings);
- ``repo.bundle``: the checkpoint's bundle, the commits from ``base`` to ``head`` (absent when
  the session made none);
- ``changes.patch``: the uncommitted changes: the checkpoint's session patch, ``base`` to the
  working tree with untracked files (``patch_base: "base"``), or, when that was too large to
  keep, its tracked changes from ``head`` alone (``patch_base: "head"``, with a warning).

The server's side (:mod:`hangar.sessions.pull`) fills it from a checkpoint and writes it with
:meth:`PullAnswer.tar`; the client's (:func:`read_package`) reads it back. Nothing here reads
a checkpoint or runs git.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import BinaryIO, Literal

from pydantic import BaseModel

from hangar.errors import NotFound

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
