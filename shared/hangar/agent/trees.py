"""A git tree of the agent's working tree after each step of a live turn (spec 002 "Trees").

:class:`Trees` hashes the repo's working tree as ``git add -A`` and ``git write-tree`` see it
(untracked files count, the repo's ``.gitignore`` and ``info/exclude`` are honoured, ``.git``
never is) and says when the tree changed since the last step. Everything git writes goes to
hangar's scratch folder, never the agent's ``.git``:

- git runs through :class:`hangar.agent.gitsafe.Repo`: a private git folder (its config,
  HEAD, and a copy of the repo's index, so the first hash rehashes only what changed), no
  repo, global or system config, hooks and fsmonitor off, no filter or driver defined;
- new objects go to an object store of hangar's (``<scratch>/objects``); hashing reads no
  object (``write-tree --missing-ok`` trusts the index for what did not change), and only
  :meth:`Trees.patch` reads the repo's objects, as an alternate (git "freshens" an object it
  would write that an alternate holds: sets its mtime, a write to the agent's ``.git``);
- the private index is split (``update-index --split-index``): a hash writes only what
  changed since the shared index;
- a path list from an edit tool (``record(tool, paths)``) is added alone
  (``git add -A -- PATHS``, literal pathspecs), which gives the same tree as a whole hash when
  only those paths changed; anything git refuses there (an ignored file, a path outside the
  repo or inside ``.git``) falls back to the whole hash.

The lines are the run log's ``{"type": "hangar.tree", ...}`` lines; ``step`` is the 0-based
ordinal of the lines :meth:`Trees.record` returned. One hash slower than ``slow_ms`` stops
hashing for the turn (one ``"skipped": "slow"`` line); git failing twice in a row (a broken
object store) stops it the same way (``"skipped": "failed"``, with git's message). A file git
cannot read (the agent made it mode 000) does not: it keeps its last entry in the tree, the
rest is hashed as it is. Not thread-safe: one driver thread records.

Standard library only (Python >= 3.9): shipped into sandboxes with the driver. Git is run with
``posix_spawn`` (``subprocess`` costs more to import than a hash) and ``-C`` (the process's
working folder is never changed: the driver has other threads).
"""

from __future__ import annotations

import os
import select
import signal
import time

from hangar.agent.gitsafe import COMMAND_LINE, GitError, Repo

ERROR_CHARS = 300
"""At most this much of git's message goes into a ``"skipped": "failed"`` line."""
MAX_PATHS = 64
"""An edit naming more paths than this is hashed whole (a command line stays short)."""
_HEX = frozenset("0123456789abcdef")


_UNREADABLE = ("error: open(", "error: unable to index file ")


def _only_unreadable(err: bytes) -> bool:
    """Whether ``git add --ignore-errors`` failed only on files it could not read (the agent
    may ``chmod 000`` a file, or make a FIFO of one): the index was written with the rest, and
    those keep their last entries, so the tree is the working tree but for them."""
    errors = [line for line in err.decode(errors="replace").splitlines()
              if not line.startswith("warning:")]  # fmt: skip
    return bool(errors) and all(line.startswith(_UNREADABLE) for line in errors)


def _is_object_id(text: str) -> bool:
    return len(text) in (40, 64) and set(text) <= _HEX


class Trees:
    """The trees of one turn over the repo at ``repo_dir``, with hangar's private git folder,
    index and object store under ``scratch`` (a folder of hangar's, out of the agent's reach,
    that the caller makes and removes). Raises GitError when ``repo_dir`` has no ``.git``
    folder or no HEAD."""

    def __init__(self, repo_dir: str, scratch: str, slow_ms: float = 2000.0) -> None:
        self.repo = Repo(repo_dir, scratch)
        self.worktree = repo_dir
        self.slow_ms = slow_ms
        self.objects = os.path.join(scratch, "objects")
        os.makedirs(self.objects, exist_ok=True)
        self.index = os.path.join(self.repo.shadow, "index")
        # Writing git reads no object: an object it writes that the repo already has would be
        # "freshened" there (its mtime set), a write to the agent's .git. So the repo's objects
        # are an alternate only for reading (the patches), and write-tree trusts the index.
        self.writing = {"GIT_OBJECT_DIRECTORY": self.objects, "GIT_LITERAL_PATHSPECS": "1"}
        self.reading = {**self.writing, "GIT_ALTERNATE_OBJECT_DIRECTORIES":
                        os.path.join(repo_dir, ".git", "objects")}  # fmt: skip
        self.step = 0
        self.last: str | None = None
        self.stopped = False
        self._seen: tuple[int, int, int] | None = None  # the index's stat after the last hash
        # Bits that make git look away from a tracked file's changes would hide them here too.
        try:
            self.repo.reveal_hidden()
        except GitError:  # an index git cannot read: start from HEAD's tree
            self._fresh_index()
        # A split index: each hash writes (and checksums) only the entries that changed since
        # the shared index, not all of them (a third off a one-file edit on 5,000 files). An
        # index git cannot read stays as it is: the first record starts it again.
        self._git("update-index", "--split-index")

    # -- recording ------------------------------------------------------------------------

    def record(self, tool: str | None, paths: list[str] | None = None) -> dict[str, object] | None:
        """Hash the working tree now. Returns the ``hangar.tree`` line when the tree changed
        since the last line (the first call always returns one), None when it did not or
        hashing has stopped. ``paths`` (absolute, or relative to the repo) are the files an
        edit tool names: only they are added when git accepts them all."""
        if self.stopped:
            return None
        start = time.perf_counter()
        try:
            tree = self._hash(paths)
        except GitError as exc:
            self.stopped = True
            return self._line(tool, start, skipped="failed", error=exc.message[:ERROR_CHARS])
        except OSError as exc:  # git cannot be run (gone, or out of processes)
            self.stopped = True
            return self._line(tool, start, skipped="failed", error=str(exc)[:ERROR_CHARS])
        ms = (time.perf_counter() - start) * 1000.0
        if ms > self.slow_ms:
            self.stopped = True
            return self._line(tool, start, skipped="slow")
        if tree is None or tree == self.last:
            return None
        self.last = tree
        return self._line(tool, start, tree=tree)

    def _line(self, tool: str | None, start: float, **fields: object) -> dict[str, object]:
        ms = round((time.perf_counter() - start) * 1000.0, 2)
        line = {"type": "hangar.tree", "step": self.step, "tool": tool, **fields, "ms": ms}
        self.step += 1
        return line

    def _hash(self, paths: list[str] | None) -> str | None:
        """The working tree's tree id, or None when the index is as the last hash left it (so
        the tree is the last one)."""
        added = False
        if paths:
            relative = self._relative(paths)
            if relative:
                code, _, _ = self._git("add", "-A", "--", *relative)
                added = code == 0
        if not added:
            code, _, err = self._git("add", "-A", "--ignore-errors")
            if code != 0 and not _only_unreadable(err):  # an index git cannot read: start
                self._fresh_index()  # again from HEAD's tree
                code, _, err = self._git("add", "-A", "--ignore-errors")
            if code != 0 and not _only_unreadable(err):
                raise GitError("add", err.decode(errors="replace").strip() or "failed")
        seen = self._index_stat()
        if seen is not None and seen == self._seen and self.last is not None:
            return None  # git add rewrites the index only when it changed
        code, out, err = self._git("write-tree", "--missing-ok")
        tree = out.decode(errors="replace").strip()
        if code != 0 or not _is_object_id(tree):
            raise GitError("write-tree", err.decode(errors="replace").strip() or "failed")
        self._seen = self._index_stat()  # write-tree may rewrite it (its cache of trees)
        return tree

    def _relative(self, paths: list[str]) -> list[str] | None:
        """``paths`` relative to the repo, or None when one is outside it or inside ``.git``,
        is no string or holds a NUL, or there are more than MAX_PATHS (the whole hash decides
        then: the paths come from the agent's tool input)."""
        if len(paths) > MAX_PATHS:
            return None
        out = []
        for path in paths:
            if not isinstance(path, str) or not path or "\0" in path:
                return None
            full = os.path.normpath(os.path.join(self.worktree, path))
            rel = os.path.relpath(full, self.worktree)
            parts = rel.split(os.sep)
            if rel == "." or parts[0] == ".." or any(p.lower() == ".git" for p in parts):
                return None
            out.append(rel)
        return out

    def _index_stat(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.index)
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_size, st.st_mtime_ns

    def _fresh_index(self) -> None:
        self._seen = None
        if self.repo.head:
            try:
                self.repo.fresh_index()
                return
            except GitError:
                pass  # HEAD's tree is unreadable too: start from an empty index
        for name in os.listdir(self.repo.shadow):
            if name == "index" or name.startswith("sharedindex."):
                os.unlink(os.path.join(self.repo.shadow, name))

    # -- patches --------------------------------------------------------------------------

    def patch(self, since_tree: str, tree: str, limit: int) -> tuple[bytes, bool]:
        """The binary diff (``git diff-tree -p --binary``, full object ids, no rename
        detection, no external diff or textconv) from ``since_tree`` to ``tree``, both trees
        this object recorded, and whether it was cut. A cut patch ends before the first file
        whose diff would pass ``limit`` bytes, so what is kept still applies. Raises
        GitError when git fails or a tree id is not one (what did not change since the
        repo's index is read from the repo's objects: an object the agent pruned since is
        an error here)."""
        if not (_is_object_id(since_tree) and _is_object_id(tree)):
            raise GitError("diff-tree", "not a tree id")
        code, out, err = self._git("diff-tree", "-r", "-p", "--binary", "--full-index",
                                   "--no-ext-diff", "--no-textconv", "--no-color", "--no-renames",
                                   since_tree, tree, limit=limit, env=self.reading)  # fmt: skip
        if len(out) > limit and code in (0, -signal.SIGKILL):
            cut = out.rfind(b"\ndiff --git ", 0, limit + 1)
            return (out[:cut + 1] if cut >= 0 else b""), True
        if code != 0:
            raise GitError("diff-tree", err.decode(errors="replace").strip() or "failed")
        return out, False

    # -- git --------------------------------------------------------------------------------

    def _git(self, *args: str, limit: int | None = None,
             env: dict[str, str] | None = None) -> tuple[int, bytes, bytes]:
        """(exit status, stdout, stderr) of git over the repo's working tree with hangar's
        folders (``env``: the writing one unless given). With ``limit``, once stdout passes ``limit`` bytes git is killed (status
        ``-SIGKILL``) and the first ``limit + 1`` bytes or more are returned."""
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            actions = [(os.POSIX_SPAWN_DUP2, null, 0), (os.POSIX_SPAWN_DUP2, out_w, 1),
                       (os.POSIX_SPAWN_DUP2, err_w, 2)]  # fmt: skip
            pid = os.posix_spawnp("git", ["git", "-C", self.worktree, *COMMAND_LINE, *args],
                                  self.repo.env(env or self.writing), file_actions=actions)  # fmt: skip
        finally:
            for fd in (null, out_w, err_w):
                os.close(fd)
        chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
        open_fds = [out_r, err_r]
        size = 0
        killed = False
        try:
            while open_fds:
                ready, _, _ = select.select(open_fds, [], [])
                for fd in ready:
                    data = os.read(fd, 1 << 16)
                    if not data:
                        open_fds.remove(fd)
                        continue
                    chunks[fd].append(data)
                    if fd == out_r:
                        size += len(data)
                        if limit is not None and size > limit and not killed:
                            os.kill(pid, signal.SIGKILL)
                            killed = True
                if killed:
                    break
        finally:
            os.close(out_r)
            os.close(err_r)
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status), b"".join(chunks[out_r]), b"".join(chunks[err_r])
