"""A session's workspace in a sandbox: the repo cloned at ``/workspace/<repo>`` on its work branch.

Every sandbox of a session puts the repo at the same path (BRIEF invariant 7), so the harnesses'
conversation folders, which are keyed by the working directory, line up after a restore.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

from hangar.errors import SandboxError
from hangar.sandboxes import WORKSPACE, Sandboxes

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def repo_dir_for(repo: str) -> str:
    """``/workspace/<name>`` for a git URL or a local path (``.../app.git`` gives ``app``)."""
    tail = repo.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1]
    name = _UNSAFE.sub("-", tail.removesuffix(".git")).strip(".-") or "repo"
    return posixpath.join(WORKSPACE, name)


@dataclass(frozen=True)
class Workspace:
    repo_dir: str
    base_branch: str | None
    base_commit: str


def clone_argv(repo: str, *, work_branch: str, branch: str | None = None) -> list[str]:
    """The command (run as the agent, detached) that clones ``repo`` at ``branch`` (default: the
    remote's HEAD) into its folder and checks out ``work_branch``; a folder left by a clone
    that died is removed first."""
    repo_dir = repo_dir_for(repo)
    script = (
        'set -e; rm -rf -- "$1"; git clone -q "${@:4}" -- "$2" "$1"; git -C "$1" checkout -q -B "$3"'
    )
    return ["bash", "-c", script, "clone", repo_dir, repo, work_branch,
            *(["--branch", branch] if branch else [])]  # fmt: skip


def read_workspace(
    sandboxes: Sandboxes, sandbox_id: str, repo: str, branch: str | None = None
) -> Workspace:
    """The cloned workspace: its folder, the branch it came from and the commit it is at."""
    repo_dir = repo_dir_for(repo)
    head = sandboxes.exec(sandbox_id, ["git", "-C", repo_dir, "rev-parse", "HEAD"])
    if not head.ok:
        raise SandboxError(f"{repo_dir} is not a clone: {head.stderr.decode(errors='replace').strip()}",
                           repo=repo)  # fmt: skip
    base_branch = branch
    if base_branch is None:
        ref = sandboxes.exec(
            sandbox_id, ["git", "-C", repo_dir, "rev-parse", "--abbrev-ref", "origin/HEAD"]
        )
        base_branch = ref.stdout.decode().strip().removeprefix("origin/") or None
    return Workspace(repo_dir=repo_dir, base_branch=base_branch,
                     base_commit=head.stdout.decode().strip())  # fmt: skip


def clone(
    sandboxes: Sandboxes,
    sandbox_id: str,
    repo: str,
    *,
    work_branch: str,
    branch: str | None = None,
    timeout: float = 600,
) -> Workspace:
    """Clone ``repo`` now (what a start does detached, for tools and tests): SandboxError with
    git's message when the clone fails."""
    result = sandboxes.exec(sandbox_id, clone_argv(repo, work_branch=work_branch, branch=branch),
                            timeout=timeout)  # fmt: skip
    if not result.ok:
        raise SandboxError(f"git clone failed: {result.stderr.decode(errors='replace').strip()}",
                           repo=repo)  # fmt: skip
    return read_workspace(sandboxes, sandbox_id, repo, branch)
