"""The user's side of moving work between a local checkout and a cloud agent session, with the
user's own ``git``.

:func:`from_local` packs what a checkout has that its remote does not: the unpushed commits as
a bundle and the uncommitted changes (staged, unstaged and untracked, .gitignore respected) as
one binary diff, made on a temporary index so the user's index is never written.

:func:`apply_pull` brings a session's last checkpoint into the checkout: its commits onto the
local branch ``hangar/<name>`` (created, fast-forwarded, or with ``force`` reset), and with
``checkout`` that branch checked out and the session's uncommitted changes applied on top.
Every refusal happens before anything changes, so a refused pull leaves the repo as it was.

git runs as ``git -C <top> ...`` (never through a shell) with ``GIT_TERMINAL_PROMPT=0``; every
temporary file lives in a temporary directory, and the only temporary ref
(``refs/hangar-pull/<name>``) is deleted before returning.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from hangar.errors import InvalidInput
from hangar.redact import redact

PULL_REF_PREFIX = "refs/hangar-pull/"
CHECKPOINT_REF = "refs/hangar/checkpoint"
MAX_NAMED_PATHS = 10
"""How many paths a refusal names before it says how many more there are."""

# Options that keep a patch git makes here appliable whatever the user's diff config says.
_DIFF_OPTIONS = (
    "--binary", "--no-textconv", "--no-ext-diff", "--no-color", "--no-renames",
    "--src-prefix=a/", "--dst-prefix=b/", "--submodule=short",
)  # fmt: skip
_OID = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")
_URL_USERINFO = re.compile(r"(?<=://)[^/@\s]+@")

Moved = Literal["created", "fast-forward", "unchanged", "forced"]


@dataclass(frozen=True)
class LocalWork:
    """What a checkout has that its remote does not. ``bundle`` holds the commits of
    ``HEAD --not --remotes`` (None when every commit is pushed), ``base_commit`` the merge base
    of HEAD and its upstream (on a remote), ``patch`` the uncommitted changes relative to HEAD
    as one ``git diff --binary`` (None when there are none)."""

    bundle: bytes | None
    base_commit: str | None
    patch: bytes | None
    notes: list[str]


@dataclass(frozen=True)
class PullPackage:
    """A session's last checkpoint as the server hands it out.

    ``head`` is the session's HEAD commit; ``base`` the commit it builds on, which is on the
    remote; ``bundle`` a git bundle of ``refs/hangar/checkpoint`` (= head) without base's
    history (None when head is base); ``patch`` a ``git diff --binary`` from the commit
    ``patch_base`` names (``"base"`` or ``"head"``) to the session's working tree, untracked
    files included."""

    head: str
    base: str | None
    bundle: bytes | None
    patch: bytes | None
    patch_base: str
    warnings: list[str]


@dataclass(frozen=True)
class PullOutcome:
    """What :func:`apply_pull` did: ``branch`` (``hangar/<name>``) now at ``head``, how it
    ``moved``, whether it was ``checked_out`` and the session's uncommitted changes
    ``applied`` to the working tree."""

    branch: str
    head: str
    moved: Moved
    checked_out: bool
    applied: bool
    notes: list[str]


# -- from_local ---------------------------------------------------------------------------------


def from_local(cwd: Path) -> LocalWork:
    """The unpushed commits and the uncommitted changes of the checkout at ``cwd``.

    Refused (:class:`InvalidInput`) when ``cwd`` is not a git checkout, HEAD is not on a branch
    with an upstream, or the merge base with the upstream is on no remote (the session could not
    get it). Nothing in the repo is written but objects: not the index, the working tree, a ref
    or the stash."""
    top = _toplevel(cwd)
    head = _rev(top, "HEAD")
    if head is None:
        raise InvalidInput(f"{top} has no commits yet: commit and push something first")
    base = _base_commit(top, head)
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="hangar-local-") as tmp:
        scratch = Path(tmp)
        unpushed = int(_text(top, "rev-list", "--count", "HEAD", "--not", "--remotes"))
        bundle: bytes | None = None
        if unpushed:
            path = scratch / "work.bundle"
            _git(top, "bundle", "create", "-q", str(path), "HEAD", "--not", "--remotes")
            bundle = path.read_bytes()
            notes.append(f"{unpushed} unpushed commit(s)")
        else:
            notes.append("no unpushed commits")
        patch = _worktree_patch(top, scratch / "index", "HEAD") or None
        if patch is None:
            notes.append("no uncommitted changes")
    return LocalWork(bundle=bundle, base_commit=base, patch=patch, notes=notes)


def _base_commit(top: Path, head: str) -> str:
    """The merge base of HEAD and its upstream, refused unless it is on a remote."""
    branch = _text(top, "symbolic-ref", "-q", "--short", "HEAD", check=False)
    if not branch:
        raise InvalidInput(
            "HEAD is detached, so it has no upstream: check out a branch that tracks a remote "
            "branch (git switch -c NAME; git push -u origin NAME)"
        )
    remote = _first_remote(top)
    upstream = _text(top, "rev-parse", "--verify", "-q", "@{upstream}", check=False)
    if not upstream:
        if _text(top, "config", "--get", f"branch.{branch}.merge", check=False):
            raise InvalidInput(
                f"the upstream of branch {branch} is not here: fetch it (git fetch {remote}) "
                f"or push the branch (git push -u {remote} {branch})",
                branch=branch,
            )
        raise InvalidInput(
            f"branch {branch} has no upstream: push it (git push -u {remote} {branch}) or set "
            f"one (git branch --set-upstream-to {remote}/BRANCH)",
            branch=branch,
        )
    base = _text(top, "merge-base", head, upstream, check=False)
    if not base:
        raise InvalidInput(
            f"branch {branch} shares no history with its upstream", branch=branch
        )
    on_remote = _text(
        top, "for-each-ref", "--count=1", "--format=%(refname)", "--contains", base,
        "refs/remotes/",
    )  # fmt: skip
    if not on_remote:
        name = _text(top, "rev-parse", "--abbrev-ref", "@{upstream}", check=False) or "upstream"
        raise InvalidInput(
            f"the base of branch {branch} ({base[:12]}, where it meets its upstream {name}) "
            f"is not pushed: push {name} first, or set an upstream that is on a remote "
            f"(git branch --set-upstream-to {remote}/BRANCH)",
            branch=branch,
            base=base,
        )
    return base


def _first_remote(top: Path) -> str:
    remotes = _text(top, "remote", check=False).split()
    return "origin" if not remotes or "origin" in remotes else remotes[0]


def _worktree_patch(top: Path, index: Path, since: str) -> bytes:
    """``git diff --binary`` from ``since`` to the working tree, untracked files included and
    ignored ones not, built on a temporary index (the user's index is not touched)."""
    _git(top, "read-tree", "HEAD", index=index)
    _git(top, "add", "-A", index=index)
    return _git(top, "diff", "--cached", *_DIFF_OPTIONS, since, "--", index=index)


# -- apply_pull ---------------------------------------------------------------------------------


def apply_pull(
    cwd: Path, name: str, package: PullPackage, *, checkout: bool, force: bool
) -> PullOutcome:
    """Bring the session ``name``'s checkpoint into the checkout at ``cwd`` as branch
    ``hangar/<name>``; with ``checkout`` also switch to it and apply the session's uncommitted
    changes (new files stay untracked).

    Refused (:class:`InvalidInput`), before anything changes, when: the package's commits do
    not build on anything here (fetch first); the branch has commits of its own and ``force``
    is not given; the branch is the current one and would move without ``checkout``, or is
    checked out in another worktree; with ``checkout``, tracked files have uncommitted changes
    or an untracked or ignored file is where the checkout or the changes would write."""
    top = _toplevel(cwd)
    branch = f"hangar/{name}"
    ref = f"refs/heads/{branch}"
    if _git_run(top, "check-ref-format", ref).returncode != 0 or not name:
        raise InvalidInput(f"{name!r} cannot name a branch (hangar/{name})", name=name)
    head = _oid(package.head, "head")
    base = _oid(package.base, "base") if package.base is not None else None
    if package.patch_base not in ("base", "head"):
        raise InvalidInput(f"patch_base is {package.patch_base!r}, not 'base' or 'head'")
    temp_ref = PULL_REF_PREFIX + name
    notes = list(package.warnings)
    with tempfile.TemporaryDirectory(prefix="hangar-pull-") as tmp:
        scratch = Path(tmp)
        try:
            if package.bundle is not None:
                _fetch_bundle(top, scratch, package.bundle, head, base, temp_ref)
            elif not _has_commit(top, head):
                what = "base" if head == base else "head"
                raise InvalidInput(
                    f"fetch from the remote first (git fetch), {what} {head[:12]} is not here",
                    commit=head,
                )
            return _pull(top, scratch, name, branch, ref, package, head, base, notes,
                         checkout=checkout, force=force)  # fmt: skip
        finally:
            if _rev(top, temp_ref) is not None:
                _git_run(top, "update-ref", "-d", temp_ref)


def _pull(
    top: Path,
    scratch: Path,
    name: str,
    branch: str,
    ref: str,
    package: PullPackage,
    head: str,
    base: str | None,
    notes: list[str],
    *,
    checkout: bool,
    force: bool,
) -> PullOutcome:
    old = _rev(top, ref)
    current_ref = _text(top, "symbolic-ref", "-q", "HEAD", check=False) or None
    current_head = _rev(top, "HEAD")
    is_current = current_ref == ref
    moved = _how_it_moves(top, branch, old, head, force=force)
    if moved != "unchanged":
        if is_current and not checkout:
            raise InvalidInput(
                f"{branch} is the checked-out branch, so pulling would move it under the "
                f"working tree: pull with --checkout, or switch to another branch first",
                branch=branch,
            )
        if not is_current and ref in _worktree_branches(top):
            raise InvalidInput(
                f"{branch} is checked out in another worktree: pull there, or switch that "
                "worktree to another branch first",
                branch=branch,
            )
    change, changed = _uncommitted_change(
        top, scratch, package, head, base, strict=checkout, notes=notes
    )
    if checkout:
        _refuse_unless_safe_to_check_out(top, current_head, head, changed)
    # Every refusal is behind us: from here on the repo changes.
    if checkout and is_current:
        if moved != "unchanged":
            _git(top, "reset", "-q", "--keep", head)
    else:
        if moved != "unchanged":
            _git(top, "update-ref", "-m", f"hangar pull {name}", ref, head, old or "")
        if checkout:
            _git(top, "checkout", "-q", branch, "--")
    applied = False
    if checkout:
        if change:
            patch_file = scratch / "uncommitted.patch"
            patch_file.write_bytes(change)
            _git(top, "apply", "--binary", "--whitespace=nowarn", str(patch_file))
            applied = True
            notes.append("applied the session's uncommitted changes (new files are untracked)")
        else:
            notes.append("the session has no uncommitted changes")
    elif change:
        notes.append("the session has uncommitted changes: pull with --checkout to apply them")
    return PullOutcome(
        branch=branch, head=head, moved=moved, checked_out=checkout, applied=applied, notes=notes
    )


def _fetch_bundle(
    top: Path, scratch: Path, bundle: bytes, head: str, base: str | None, temp_ref: str
) -> None:
    """The bundle's commits into ``temp_ref``, refused unless it builds on commits that are here
    and holds ``refs/hangar/checkpoint`` at ``head``."""
    prerequisites, refs = _bundle_header(bundle)
    if refs.get(CHECKPOINT_REF) != head:
        raise InvalidInput(
            f"the session's bundle does not hold {CHECKPOINT_REF} at its head {head[:12]}"
        )
    missing = [oid for oid in prerequisites if not _has_commit(top, oid)]
    if missing:
        first = base if base in missing else missing[0]
        raise InvalidInput(
            f"fetch from the remote first (git fetch), base {first[:12]} is not here",
            commit=first,
        )
    path = scratch / "session.bundle"
    path.write_bytes(bundle)
    _git(top, "bundle", "verify", "-q", str(path))
    _git(
        top, "fetch", "-q", "--no-tags", "--no-write-fetch-head", "--no-auto-gc",
        "--no-recurse-submodules", str(path), f"+{CHECKPOINT_REF}:{temp_ref}",
    )  # fmt: skip
    if _rev(top, temp_ref) != head:
        raise InvalidInput(f"the session's bundle did not bring its head {head[:12]}")


def _bundle_header(bundle: bytes) -> tuple[list[str], dict[str, str]]:
    """(prerequisite commits, {ref: commit}) from a v2 or v3 bundle's header."""
    lines = iter(bundle.split(b"\n"))
    if next(lines, b"") not in (b"# v2 git bundle", b"# v3 git bundle"):
        raise InvalidInput("the session's bundle is not a git bundle")
    prerequisites: list[str] = []
    refs: dict[str, str] = {}
    for raw in lines:
        if not raw:
            return prerequisites, refs
        line = raw.decode(errors="replace")
        if line.startswith("@"):
            continue  # a v3 capability
        if line.startswith("-"):
            prerequisites.append(line[1:].split(" ", 1)[0])
        elif " " in line:
            oid, refname = line.split(" ", 1)
            refs[refname] = oid
    raise InvalidInput("the session's bundle has no end to its header")


def _how_it_moves(top: Path, branch: str, old: str | None, head: str, *, force: bool) -> Moved:
    if old is None:
        return "created"
    if old == head:
        return "unchanged"
    if _git_run(top, "merge-base", "--is-ancestor", old, head).returncode == 0:
        return "fast-forward"
    if force:
        return "forced"
    own = int(_text(top, "rev-list", "--count", old, "--not", head))
    raise InvalidInput(
        f"{branch} has {own} commit(s) of its own that the session does not have: keep them "
        f"on another branch (git branch NAME {branch}) and pull with --force to reset {branch} "
        "to the session's head",
        branch=branch,
        commits=own,
    )


def _uncommitted_change(
    top: Path,
    scratch: Path,
    package: PullPackage,
    head: str,
    base: str | None,
    *,
    strict: bool,
    notes: list[str],
) -> tuple[bytes, set[str]]:
    """The session's uncommitted change as a patch on ``head`` and the paths it touches (empty
    when there is none). The session's working tree W is its patch applied to the tree of the
    commit ``patch_base`` names, on a temporary index; the change is ``head``..W. When
    ``strict`` is off (no checkout) a patch that does not apply is a note, not a refusal."""
    if package.patch is None:
        return b"", set()
    since = head if package.patch_base == "head" else base
    try:
        if since is None:
            raise InvalidInput("the session's patch is relative to its base, but it names none")
        if not _has_commit(top, since):
            raise InvalidInput(
                f"fetch from the remote first (git fetch), base {since[:12]} is not here",
                commit=since,
            )
        patch_file = scratch / "session.patch"
        patch_file.write_bytes(package.patch)
        index = scratch / "session-index"
        _git(top, "read-tree", since, index=index)
        _git(top, "apply", "--cached", "--binary", "--whitespace=nowarn", str(patch_file),
             index=index)  # fmt: skip
        tree = _text(top, "write-tree", index=index)
    except InvalidInput as exc:
        if strict:
            raise
        notes.append(f"the session's uncommitted changes could not be read: {exc.message}")
        return b"", set()
    change = _git(top, "diff-tree", "-r", "-p", *_DIFF_OPTIONS, head, tree, "--")
    paths = _paths(_git(top, "diff-tree", "-r", "-z", "--name-only", "--no-renames", head, tree))
    return change, paths


def _refuse_unless_safe_to_check_out(
    top: Path, current_head: str | None, head: str, changed: set[str]
) -> None:
    """Refuse a checkout over uncommitted changes to tracked files, or one that would write
    where an untracked or ignored file is."""
    dirty = _git(top, "status", "--porcelain", "--untracked-files=no", "--ignore-submodules=none")
    if dirty.strip():
        raise InvalidInput(
            "tracked files have uncommitted changes here: commit or stash them first"
        )
    if current_head is None:
        written = _paths(_git(top, "ls-tree", "-r", "-z", "--name-only", head))
    else:
        written = _paths(_git(top, "diff-tree", "-r", "-z", "--name-only", current_head, head))
    written |= changed
    everything = _paths(_git(top, "ls-files", "-z", "--others"))
    not_ignored = _paths(_git(top, "ls-files", "-z", "--others", "--exclude-standard"))
    in_the_way = sorted(_in_the_way(written, everything))
    if not in_the_way:
        return
    named = [p + ("" if p in not_ignored else " (ignored)") for p in in_the_way[:MAX_NAMED_PATHS]]
    more = len(in_the_way) - len(named)
    listing = ", ".join(named) + (f" and {more} more" if more else "")
    raise InvalidInput(
        f"pulling with --checkout would overwrite {len(in_the_way)} untracked or ignored "
        f"file(s) here: {listing}; move them away first",
        paths=in_the_way[:MAX_NAMED_PATHS],
    )


def _in_the_way(written: set[str], untracked: set[str]) -> set[str]:
    """The untracked entries a write of ``written`` would clobber: the same path, a file where a
    folder has to be, or files under a path that becomes a file. An entry ending in / is a
    nested repository, taken whole."""
    entries = {u.rstrip("/") for u in untracked}
    hits: set[str] = set()
    for path in written:
        if path in entries:
            hits.add(path)
        parts = path.split("/")
        hits.update(p for p in ("/".join(parts[:i]) for i in range(1, len(parts))) if p in entries)
    folders = {p + "/" for p in written}
    hits.update(e for e in entries if any(e.startswith(f) for f in folders))
    return hits


def _worktree_branches(top: Path) -> set[str]:
    listing = _git(top, "worktree", "list", "--porcelain").decode(errors="surrogateescape")
    return {line[len("branch ") :] for line in listing.splitlines() if line.startswith("branch ")}


# -- git ----------------------------------------------------------------------------------------


def _toplevel(cwd: Path) -> Path:
    proc = _git_run(Path(cwd), "rev-parse", "--show-toplevel")
    top = proc.stdout.decode(errors="surrogateescape").strip()
    if proc.returncode != 0 or not top:
        raise InvalidInput(f"{cwd} is not a git checkout (or is a bare repository)")
    return Path(top)


def _oid(value: str, what: str) -> str:
    if not _OID.fullmatch(value):
        raise InvalidInput(f"the session's {what} {value!r} is not a full commit id")
    return value


def _rev(top: Path, rev: str) -> str | None:
    """The commit ``rev`` names here, or None."""
    proc = _git_run(top, "rev-parse", "--verify", "-q", f"{rev}^{{commit}}")
    if proc.returncode != 0:
        return None
    return proc.stdout.decode().strip() or None


def _has_commit(top: Path, oid: str) -> bool:
    return _git_run(top, "cat-file", "-e", f"{oid}^{{commit}}").returncode == 0


def _paths(output: bytes) -> set[str]:
    return {p.decode(errors="surrogateescape") for p in output.split(b"\0") if p}


def _text(top: Path, *args: str, index: Path | None = None, check: bool = True) -> str:
    proc = _git_run(top, *args, index=index)
    if check and proc.returncode != 0:
        raise _failed(args, proc)
    return proc.stdout.decode(errors="surrogateescape").strip() if proc.returncode == 0 else ""


def _git(top: Path, *args: str, index: Path | None = None) -> bytes:
    """git's stdout; a failure is refused with what git said."""
    proc = _git_run(top, *args, index=index)
    if proc.returncode != 0:
        raise _failed(args, proc)
    return proc.stdout


def _git_run(
    top: Path, *args: str, index: Path | None = None
) -> subprocess.CompletedProcess[bytes]:
    env: Mapping[str, str] = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    if index is not None:
        env = {**env, "GIT_INDEX_FILE": str(index)}
    return subprocess.run(
        ["git", "-C", str(top), *args],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        env=env,
        check=False,
    )


def _failed(args: Iterable[str], proc: subprocess.CompletedProcess[bytes]) -> InvalidInput:
    said = proc.stderr.decode(errors="replace").strip().splitlines()[-3:]
    message = _URL_USERINFO.sub("", redact(" / ".join(said)) or "") or f"exit {proc.returncode}"
    command = next(iter(args), "")
    return InvalidInput(f"git {command} failed: {message}", command=command)
