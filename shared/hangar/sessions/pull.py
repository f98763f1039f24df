"""Code out (spec 004, Out): a session's newest checkpoint as what ``hangar session pull``
takes, with no git run by the control plane.

``GET /api/sessions/{ref}/pull`` answers the pull archive (its format and its reader are
:mod:`hangar.exchange.pull`'s): the checkpoint's bundle and its session patch (or, when that
was too large to keep, its tracked changes from ``head``), both made by the checkpoint inside
the sandbox, copied out of blobs as they are unsealed. The client (:mod:`hangar.cli.localgit`)
fetches the bundle into ``hangar/<name>``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from hangar.errors import NotFound
from hangar.exchange.pull import MEDIA, Member, PullAnswer, PullInfo
from hangar.models import Checkpoint, Session

if TYPE_CHECKING:
    from hangar.checkpoints.checkpointer import Checkpointer
    from hangar.checkpoints.contents import Contents

__all__ = ["MEDIA", "PullAnswer", "PullInfo", "package"]


def package(checkpointer: Checkpointer, session: Session, checkpoints: list[Checkpoint]) -> PullAnswer:
    """The newest checkpoint's commits and uncommitted changes; NotFound when the session has
    no checkpoint with its head, or its commits could not be kept (over the part cap)."""
    newest = next((c for c in reversed(checkpoints) if c.head), None)
    if newest is None:
        raise NotFound(f"session {session.name} has no checkpoint to pull yet", session=session.name)
    assert newest.head is not None
    warnings = list(newest.warnings)
    members: list[Member] = []
    contents = checkpointer.contents(newest)
    bundle = contents.has("repo.bundle")
    if bundle:
        members.append(_member(contents, "repo.bundle", "repo.bundle"))
    elif newest.base != newest.head:
        raise NotFound(f"session {session.name}'s newest checkpoint ({newest.id}) kept no "
                       "bundle of its commits: " + ("; ".join(w for w in warnings if "bundle" in w)
                                                    or "they are not recorded"),
                       session=session.name)  # fmt: skip
    patch_base: Literal["base", "head"] = "base"
    if contents.has("session.patch") and newest.base:
        members.append(_member(contents, "session.patch", "changes.patch"))
    elif contents.has("wip.patch"):
        patch_base = "head"
        members.append(_member(contents, "wip.patch", "changes.patch"))
        warnings.append("changes.patch holds the tracked files' changes only: the untracked "
                        "files did not fit the checkpoint's patch")  # fmt: skip
    info = PullInfo(session=session.name, checkpoint=newest.id, taken_at=newest.ts,
                    branch=newest.branch, head=newest.head, base=newest.base,
                    bundle=bundle, patch=any(m.name == "changes.patch" for m in members),
                    patch_base=patch_base, warnings=warnings)  # fmt: skip
    return PullAnswer(info, members)


def _member(contents: Contents, part: str, name: str) -> Member:
    return Member(name, contents.size(part), lambda: contents.read(part))
