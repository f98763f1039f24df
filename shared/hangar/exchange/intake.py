"""Putting a turn's context in place in its sandbox, before the harness starts.

Files go to ``$HANGAR_IO/in/<turn>/<name>``. A bundle and a patch are copied to
``~/.hangar/incoming/<run>/`` (outside every checkpointed folder) and put in place by
:mod:`hangar.agent.context`, run as the agent: the bundle verified and fetched, the branch
fast-forwarded or started fresh, the patch applied as uncommitted changes. All of it runs with
the agent's rights only, and the control plane never runs git on what was sent. What the agent
cannot take (a patch that does not apply, a base not on the remote, a bundle that neither
fast-forwards nor starts the branch fresh) raises :class:`~hangar.errors.ContextRejected` with
git's reason, the tree as it was.

Safe to repeat, as a start step must be: files are written again, and the script records its
answer under the run's id and gives the same answer when it runs again.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, ValidationError

from hangar import agent
from hangar.errors import ContextRejected, SandboxError
from hangar.exchange.context import FILE_KINDS, ContextStore
from hangar.exchange.layout import io_path
from hangar.models import ContextKind as K, ContextRef, Session, Turn
from hangar.sandboxes import HOME, Sandboxes

INCOMING = f"{HOME}/.hangar/incoming"
APPLY_TIMEOUT = 600.0


class _Answer(BaseModel):
    """The script's one line (untrusted: it ran as the agent)."""

    model_config = ConfigDict(extra="ignore")

    ok: bool
    reason: str | None = None
    head: str | None = None
    base: str | None = None
    moved: str | None = None
    patched: bool = False


def in_dir(session: Session, n: int) -> str:
    """Where turn ``n``'s files are: ``$HANGAR_IO/in/<n>``."""
    return f"{io_path(session)}/in/{n}"


def deliver(sandboxes: Sandboxes, store: ContextStore, session: Session, turn: Turn,
            repo_dir: str) -> str | None:  # fmt: skip
    """Put turn ``turn``'s context in place in the session's sandbox (its repo at
    ``repo_dir``). Returns the session's new base commit when a bundle started the branch
    fresh (the bundle's own base_commit, as checked at the request), else None. ContextRejected when the bundle or patch cannot be taken; SandboxError
    when the sandbox fails."""
    assert session.sandbox_id is not None
    for ref in turn.context:
        if ref.kind in FILE_KINDS:
            data = store.read_all(ref)
            sandboxes.put_file(session.sandbox_id, f"{in_dir(session, turn.n)}/{ref.name}", data)
    git = [ref for ref in turn.context if ref.kind in (K.PATCH, K.BUNDLE)]
    if not git:
        return None
    folder = f"{INCOMING}/{turn.run_id}"
    config: dict[str, object] = {"repo": repo_dir,
                                 "marker": f"{folder}/answer.json",
                                 "session_base": session.base_commit,
                                 "bundle": None, "patch": None}  # fmt: skip
    for ref in git:
        path = f"{folder}/{ref.kind.value}"
        sandboxes.put_file(session.sandbox_id, path, store.read_all(ref))
        config[ref.kind.value] = {"path": path, "base_commit": ref.base_commit}
    result = agent.run_script(sandboxes, session.sandbox_id, "context", json.dumps(config),
                              timeout=APPLY_TIMEOUT)  # fmt: skip
    paths = " ".join(shlex.quote(f"{folder}/{ref.kind.value}") for ref in git)
    sandboxes.exec(session.sandbox_id, ["sh", "-c", f"rm -f -- {paths}"])
    if not result.ok:
        raise SandboxError(f"cannot put the turn's context in place: "
                           f"{result.stderr.decode(errors='replace').strip()[-500:]}")  # fmt: skip
    try:
        answer = _Answer.model_validate_json(result.stdout.strip().splitlines()[-1])
    except (ValidationError, IndexError):
        raise SandboxError("putting the turn's context in place gave no answer") from None
    if not answer.ok:
        raise ContextRejected((answer.reason or "rejected")[:2000])
    if answer.base is None:
        return None
    # The answer came from a process the agent can reach, and the base goes to hangar's own
    # git (checkpoints): only the base_commit checked at the request is ever taken.
    bundle = next((ref for ref in git if ref.kind is K.BUNDLE), None)
    if bundle is None or answer.base != bundle.base_commit:
        raise SandboxError("putting the turn's context in place answered a base it was not sent")
    return bundle.base_commit


def prompt_lines(session: Session, n: int, refs: Sequence[ContextRef]) -> list[str]:
    """What turn ``n``'s prompt says about its context (inside the exchange note)."""
    lines = []
    files = [r.name for r in refs if r.kind in FILE_KINDS and r.name]
    if files:
        lines.append(f"Attached for this turn, in {in_dir(session, n)}/: " + ", ".join(files))
    urls = [r.url for r in refs if r.kind is K.URL and r.url]
    if urls:
        lines.append("Links for this turn: " + " ".join(urls))
    if any(r.kind is K.BUNDLE for r in refs):
        lines.append("Before this turn, the person's unpushed commits were put on your branch.")
    if any(r.kind is K.PATCH for r in refs):
        lines.append("Before this turn, the person's uncommitted changes were applied to your "
                     "working tree (not committed).")  # fmt: skip
    return lines
