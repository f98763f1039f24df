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


def clone(
    sandboxes: Sandboxes,
    sandbox_id: str,
    repo: str,
    *,
    work_branch: str,
    branch: str | None = None,
    timeout: float = 600,
) -> Workspace:
    """Clone ``repo`` (at ``branch``, default the remote's HEAD) and check out ``work_branch``
    from it. Raises SandboxError with git's message when the clone fails."""
    repo_dir = repo_dir_for(repo)
    clone_argv = ["git", "clone", "-q", *(["--branch", branch] if branch else []), "--", repo, repo_dir]
    for argv in (
        clone_argv,
        ["git", "-C", repo_dir, "checkout", "-q", "-B", work_branch],
    ):
        result = sandboxes.exec(sandbox_id, argv, timeout=timeout)
        if not result.ok:
            raise SandboxError(
                f"{' '.join(argv[:2])} failed: {result.stderr.decode(errors='replace').strip()}",
                repo=repo,
            )
    head = sandboxes.exec(sandbox_id, ["git", "-C", repo_dir, "rev-parse", "HEAD"], timeout=timeout)
    base_commit = head.stdout.decode().strip()
    base_branch = branch
    if base_branch is None:
        ref = sandboxes.exec(
            sandbox_id, ["git", "-C", repo_dir, "rev-parse", "--abbrev-ref", "origin/HEAD"]
        )
        base_branch = ref.stdout.decode().strip().removeprefix("origin/") or None
    return Workspace(repo_dir=repo_dir, base_branch=base_branch, base_commit=base_commit)
