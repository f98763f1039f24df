"""Apply what the user sent with a turn to the agent's repo, before the turn starts: a bundle of
the user's unpushed commits, a patch of the user's uncommitted changes, or both. Standard
library only; run as ``python3 -I -S -c SRC CONFIG``.

It runs as the agent's own user, so it runs nothing with more rights than the agent has. Every
git call turns hooks and fsmonitor off on its command line (the flags of
:data:`hangar.agent.gitsafe.COMMAND_LINE`), reads no system config, asks no terminal, has no
standard input and drops the caller's settings for some other repo (``GIT_DIR`` and the like),
so nothing the repo's config names runs, and a repo's config cannot break it nor make it wait.

CONFIG is one JSON object (paths may be relative to the current folder)::

    repo          the top folder of a git clone whose remote is "origin"
    marker        where the answer of a run that succeeded is recorded
    session_base  the full id of the commit the session builds on (needed with a bundle)
    bundle        null, or {"path", "base_commit"}: a git bundle of the user's unpushed commits
                  (``git bundle create F HEAD --not --remotes``) and the full id of the commit
                  the user's branch builds on, which must be on the remote
    patch         null, or {"path"}: the user's uncommitted changes, ``git diff --binary HEAD``
                  with untracked files added as new files

Steps:

1. A marker that is a regular file (never read through a link) holding a recorded answer: that
   answer is printed and nothing changes (a control plane that crashed after a run runs it
   again).
2. The bundle. base_commit must be reachable from a remote-tracking ref, here or once origin has
   been fetched (at most once a run). The bundle must pass ``git bundle verify`` (if it does
   not and origin was not fetched yet, origin is fetched for commits pushed since the clone and
   the bundle verified again). Its head (the one named HEAD, else the first) is fetched to
   ``refs/hangar/incoming``, deleted again whatever happens, and must build on base_commit.
   HEAD (its branch, or HEAD itself when detached) then moves to that tip: "fresh-start" when
   the branch has no commits of its own (none in ``session_base..HEAD``), and the session's
   base becomes base_commit; else "fast-forward" when the tip's history holds HEAD. HEAD already
   at the tip does not move. The move is a checkout's (index refreshed, ``git read-tree -m
   -u``, ``git update-ref``): the agent's uncommitted changes are kept, staged ones staged, and
   the move is refused when they are in its way.
3. The patch is applied to the working tree alone (``git apply --binary``): changes stay
   unstaged and new files untracked. A patch that applies in reverse was applied by an earlier
   run and counts as applied; an empty one is no patch.
4. The answer is recorded in the marker (written beside it, then renamed) and printed.

Output, exit 0, one JSON line: ``{"ok": true, "head", "base", "moved", "patched"}``: the commit
HEAD is at, the session's new base (base_commit on a fresh start, else null), "fast-forward",
"fresh-start" or null (HEAD did not move), and whether a patch was applied. Or
``{"ok": false, "reason"}`` when what the user sent is refused: a base_commit that is not a
full commit id or not on the remote (push it first), a bundle git cannot verify or fetch or
whose commits do not build on base_commit, commits that neither fast-forward the branch nor
start it fresh, uncommitted changes of the agent in the way, a patch that does not apply. The
reason quotes what git said (its first 2,000 characters) where git said something. A refusal
records nothing and leaves HEAD, its branch, the index and the working tree as they were (a
patch refused after the move moves HEAD back): only objects fetched from the bundle or origin,
and origin's remote-tracking refs, stay.

A bad CONFIG exits 2, anything else unexpected (no repo there, git failing where it must not)
exits 1; either says why on stderr and prints nothing.
"""

import json
import os
import stat
import subprocess
import sys

from hangar.agent.gitsafe import COMMAND_LINE

INCOMING = "refs/hangar/incoming"
MAX_SAID = 2000
# What `git rev-parse --local-env-vars` lists: settings of the caller's for some other repo.
LOCAL_ENV = ("GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_CONFIG", "GIT_CONFIG_PARAMETERS",
             "GIT_CONFIG_COUNT", "GIT_OBJECT_DIRECTORY", "GIT_DIR", "GIT_WORK_TREE",
             "GIT_IMPLICIT_WORK_TREE", "GIT_GRAFT_FILE", "GIT_INDEX_FILE",
             "GIT_NO_REPLACE_OBJECTS", "GIT_REPLACE_REF_BASE", "GIT_PREFIX",
             "GIT_INTERNAL_SUPER_PREFIX", "GIT_SHALLOW_FILE", "GIT_COMMON_DIR")  # fmt: skip


class Rejected(Exception):
    """What the user sent cannot be applied, for ``reason``; the repo is as it was."""

    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


class Broken(Exception):
    """A failure that is not the user's doing; ``code`` is the exit status."""

    def __init__(self, message, code=1):
        super().__init__(message)
        self.code = code


def said(proc):
    """What a git command said (its stderr, else its stdout), cut to MAX_SAID characters."""
    text = (proc.stderr or proc.stdout).decode(errors="replace").strip()
    return text if len(text) <= MAX_SAID else text[:MAX_SAID] + "..."


class Git:
    """git on one repo, with the safety flags, no system config, no prompt, no standard input."""

    def __init__(self, repo):
        self.repo = repo
        self.env = {k: v for k, v in os.environ.items() if k not in LOCAL_ENV}
        self.env.update(GIT_TERMINAL_PROMPT="0", GIT_CONFIG_NOSYSTEM="1")
        self.fetched = False

    def run(self, *args):
        argv = ["git", "-C", self.repo, *COMMAND_LINE, *args]
        return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                              env=self.env, check=False)  # fmt: skip

    def ok(self, *args):
        return self.run(*args).returncode == 0

    def out(self, *args):
        """The output of a git command that must succeed (Broken when it does not)."""
        proc = self.run(*args)
        if proc.returncode:
            raise Broken(f"git {args[0]}: {said(proc)}")
        return proc.stdout.decode(errors="replace").strip()

    def ancestor(self, older, newer):
        """Whether commit ``older`` is in the history of commit ``newer``."""
        proc = self.run("merge-base", "--is-ancestor", older, newer)
        if proc.returncode > 1:
            raise Broken(f"git merge-base: {said(proc)}")
        return proc.returncode == 0

    def fetch_origin(self):
        """Fetch origin, at most once a run: what git said when that failed, else ""."""
        if self.fetched:
            return ""
        self.fetched = True
        proc = self.run("fetch", "-q", "origin")
        return said(proc) if proc.returncode else ""


# The config and the marker -------------------------------------------------------------------


def read_config(argv):
    """CONFIG from the command line, its paths made absolute (Broken, exit 2, when it is bad)."""
    if len(argv) != 1:
        raise Broken("usage: context CONFIG_JSON", 2)
    try:
        config = json.loads(argv[0])
    except ValueError as exc:
        raise Broken(f"CONFIG is not JSON: {exc}", 2) from None
    if not isinstance(config, dict):
        raise Broken("CONFIG is not a JSON object", 2)
    out = {"repo": os.path.abspath(text(config, "repo")),
           "marker": os.path.abspath(text(config, "marker"))}  # fmt: skip
    for key in ("bundle", "patch"):
        item = config.get(key)
        if item is not None:
            if not isinstance(item, dict):
                raise Broken(f"CONFIG.{key} must be null or an object", 2)
            item = dict(item, path=os.path.abspath(text(item, "path", key)))
            if not os.path.isfile(item["path"]):
                raise Broken(f"CONFIG.{key}.path: no file at {item['path']}", 2)
        out[key] = item
    if out["bundle"]:
        text(out["bundle"], "base_commit", "bundle")
        out["session_base"] = text(config, "session_base")
        if not is_commit_id(out["session_base"]):
            raise Broken("CONFIG.session_base must be a full commit id", 2)
    return out


def text(obj, key, where=None):
    value = obj.get(key)
    if not isinstance(value, str) or not value:
        name = f"CONFIG.{where}.{key}" if where else f"CONFIG.{key}"
        raise Broken(f"{name} must be a non-empty string", 2)
    return value


def is_commit_id(value):
    """Whether ``value`` is a whole object id (SHA-1 or SHA-256) in lowercase hex."""
    return len(value) in (40, 64) and all(c in "0123456789abcdef" for c in value)


def recorded(marker):
    """The answer an earlier run recorded at ``marker``, or None: no regular file there (a link
    is not followed), or no answer in it."""
    try:
        fd = os.open(marker, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, 1 << 16)
    finally:
        os.close(fd)
    try:
        answer = json.loads(data)
    except ValueError:
        return None
    return answer if isinstance(answer, dict) and answer.get("ok") is True else None


def record(marker, answer):
    """Write ``answer`` to ``marker`` whole: a file beside it, flushed, then renamed over it."""
    os.makedirs(os.path.dirname(marker), exist_ok=True)
    tmp = f"{marker}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, (json.dumps(answer) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, marker)


# The bundle ----------------------------------------------------------------------------------


def take_bundle(git, bundle, session_base, head):
    """Move HEAD from commit ``head`` to the bundle's tip; (how it moved, the new base)."""
    base = bundle["base_commit"].lower()
    check_base(git, base)
    tip = fetch_bundle(git, bundle["path"])
    if not git.ancestor(base, tip):
        raise Rejected(f"the bundle's commits do not build on base_commit {base}")
    if tip == head:
        return None, None
    own = int(git.out("rev-list", "--count", f"{session_base}..HEAD"))
    if not own:  # nothing of the session's own to keep: it starts over on the user's base
        moved, new_base = "fresh-start", base
    elif git.ancestor(head, tip):
        moved, new_base = "fast-forward", None
    else:
        commits = "1 commit" if own == 1 else f"{own} commits"
        raise Rejected(f"the bundle's commits neither fast-forward {branch(git)} (it has "
                       f"{commits} of its own) nor start it fresh")  # fmt: skip
    switch(git, head, tip)
    return moved, new_base


def check_base(git, base):
    """Rejected unless commit ``base`` is reachable from a remote-tracking ref, here or once
    origin has been fetched."""
    if not is_commit_id(base):
        raise Rejected(f"base_commit {base[:100]!r} is not a full commit id")
    if on_remote(git, base):
        return
    failed = git.fetch_origin()
    if not on_remote(git, base):
        reason = f"base_commit {base} is not on the remote (push it first)"
        raise Rejected(reason + (f"; git fetch origin: {failed}" if failed else ""))


def on_remote(git, sha):
    if not git.ok("cat-file", "-e", sha + "^{commit}"):
        return False
    refs = git.out("for-each-ref", "--count=1", "--contains", sha, "refs/remotes")
    return bool(refs)


def fetch_bundle(git, path):
    """Verify the bundle and fetch its head (HEAD, else the first) to INCOMING; its commit."""
    verify = git.run("bundle", "verify", "-q", path)
    if verify.returncode and not git.fetched:  # it may need commits pushed since the clone
        git.fetch_origin()
        verify = git.run("bundle", "verify", "-q", path)
    if verify.returncode:
        raise Rejected(f"the bundle does not verify: {said(verify)}")
    listed = git.out("bundle", "list-heads", path).splitlines()
    heads = [line.split(" ", 1)[1] for line in listed if " " in line]
    if not heads:
        raise Rejected("the bundle has no head")
    ref = "HEAD" if "HEAD" in heads else heads[0]
    fetch = git.run("fetch", "-q", "--no-tags", path, f"+{ref}:{INCOMING}")
    if fetch.returncode:
        raise Rejected(f"the bundle cannot be fetched: {said(fetch)}")
    tip = git.run("rev-parse", "--verify", "-q", INCOMING + "^{commit}")
    if tip.returncode:
        raise Rejected(f"the bundle's head {ref} is not a commit")
    return tip.stdout.decode().strip()


def branch(git):
    name = git.run("symbolic-ref", "-q", "--short", "HEAD")
    return "branch " + name.stdout.decode().strip() if name.returncode == 0 else "detached HEAD"


def switch(git, frm, to):
    """Move HEAD (its branch, or HEAD itself when detached) from commit ``frm`` to ``to`` as a
    checkout would: the agent's uncommitted changes are kept, staged ones staged; Rejected, with
    nothing changed, when they are in the way."""
    git.run("update-index", "-q", "--refresh")  # a file touched but unchanged is not in the way
    proc = git.run("read-tree", "-m", "-u", frm, to)
    if proc.returncode:
        raise Rejected(f"the agent's uncommitted changes are in the way: {said(proc)}")
    git.out("update-ref", "-m", "hangar: the user's commits", "HEAD", to, frm)


# The patch -----------------------------------------------------------------------------------


def apply_patch(git, path):
    """Apply the patch to the working tree alone; whether there was one (an empty file is none).
    Rejected when it applies neither forward nor, applied by an earlier run, in reverse."""
    if os.path.getsize(path) == 0:
        return False
    apply = ("apply", "--binary", "--whitespace=nowarn")
    proc = git.run(*apply, "--check", path)
    if proc.returncode == 0:
        proc = git.run(*apply, path)
        if proc.returncode == 0:
            return True
    elif git.ok(*apply, "--check", "--reverse", path):
        return True
    raise Rejected(f"the patch does not apply: {said(proc)}")


# The whole -----------------------------------------------------------------------------------


def take(config):
    """Apply the bundle, then the patch; the answer. Rejected with the repo as it was."""
    git = Git(config["repo"])
    top = git.out("rev-parse", "--show-toplevel")
    if os.path.realpath(top) != os.path.realpath(config["repo"]):
        raise Broken(f"{config['repo']} is not the top of a git clone ({top} is)")
    old = git.out("rev-parse", "--verify", "HEAD")
    moved = base = None
    if config["bundle"]:
        try:
            moved, base = take_bundle(git, config["bundle"], config["session_base"], old)
        finally:
            git.run("update-ref", "-d", INCOMING)
    head = git.out("rev-parse", "--verify", "HEAD")
    patched = False
    if config["patch"]:
        try:
            patched = apply_patch(git, config["patch"]["path"])
        except Rejected as exc:
            if moved:
                try:
                    switch(git, head, old)
                except Rejected as undo:
                    raise Broken(f"{exc.reason}; and moving back to {old} failed: "
                                 f"{undo.reason}") from None  # fmt: skip
            raise
    return {"ok": True, "head": head, "base": base, "moved": moved, "patched": patched}


def main():
    try:
        config = read_config(sys.argv[1:])
        answer = recorded(config["marker"])
        if answer is None:
            answer = take(config)
            record(config["marker"], answer)
    except Rejected as exc:
        answer = {"ok": False, "reason": exc.reason}
    except Broken as exc:
        sys.stderr.write(f"context: {exc}\n")
        sys.exit(exc.code)
    sys.stdout.write(json.dumps(answer) + "\n")


if __name__ == "__main__":
    main()
