"""Restore a checkpoint inside a fresh sandbox. Standard library only; run as
``python3 -I -S -c SRC`` with the checkpoint on standard input.

Standard input is one JSON line (the plan) followed by the bytes of each part it lists, in
order, each exactly ``size`` bytes, then the line :data:`PARTS_VERIFIED`. The control plane
streams the parts as it unseals them and sends that line only once every part authenticated
and matched its record: without it (the input ends early: a part failed its check) the restore
stops at ``receive``, before step 2 (:mod:`hangar.checkpoints.restore`)::

    repo, home          where the repo and HOME are
    branch, head        check out ``branch`` at ``head`` (detached when branch is null)
    conversation_dirs   folders relative to HOME that agent.tar.* may write (absent: none)
    exchange_dir        the folder relative to HOME that exchange.tar.* may write (absent: none)
    tmp                 hangar's own scratch folder (absent: the system's temporary folder)
    max_bytes           the most the restore may write, uncompressed (absent: no cap)
    fresh               true when nothing has changed the repo's tree since its clone (absent:
                        false): step 3 checks the head out over the clone without a reset or
                        clean first, as a switch that rewrites only what differs; taken only
                        by the first restore begun in the sandbox (marked in ``tmp``), never
                        by a retry
    parts               [{"name", "size", "compression"}]: any of repo.bundle, staged.patch,
                        wip.patch, untracked.tar.*, agent.tar.*, exchange.tar.*

Steps, in order:

0. End every process of the sandbox's agent (:mod:`hangar.agent.quiesce`; restore_failed at
   step ``agent`` if one outlives ten seconds): no process the environment's setup left running
   can change the trees while the steps below walk them as hangar's user.
1. Receive the parts into a private staging folder (removed after the answer), each archive
   decompressed into a plain tar as it comes (counted against ``max_bytes``), then
   :data:`PARTS_VERIFIED`; a part that fails to decompress is named only after that line.
   Nothing before this step changes the repo or HOME.
2. Check every archive by its content alone: each member is a relative path without ``..``;
   a file, folder or symbolic link (no hard links, devices, FIFOs); not an earlier link member
   nor beneath one; not a file where an earlier member put a folder, or the reverse. Untracked
   members have no ``.git`` component; agent members lie under one of ``conversation_dirs`` (or
   are its folder). A link's target is relative, stays inside the root once normalised, has no
   ``..`` after a normal component (so chained links cannot climb out) and obeys the same
   ``.git``/conversation rule. A refusal here comes before the repo or HOME is touched.
3. git, through :mod:`hangar.agent.gitsafe` (nothing the repo's config names runs): reset
   --hard, clean -fd (git lists the untracked files, :mod:`hangar.agent.fdtree` removes them
   by folder descriptors, never through a link), verify and fetch repo.bundle, check out (less
   any path git refuses, when the head's tree holds one; on a tree the plan calls fresh, the
   head is checked out over the clone as a switch first, and the reset, clean and checkout
   above come only if git refuses), apply staged.patch to the index only
   (when it no longer applies, the changes stay unstaged), then wip.patch (head to working
   tree) to the working tree; then the repo's branch (detached when git refuses the branch),
   HEAD and index are set to the result. Every archive as it is decompressed, and the head's
   tree before its checkout, count against ``max_bytes``.
4. Remove a link standing in HOME where a conversation or exchange folder goes, or where any
   folder an archive for HOME writes goes, or on the way to one (a fresh sandbox's HOME holds
   only what its setup made, and the archive is the session's own record of those folders: the
   link goes, never what it points to, and a warning names it). Check the tree on disk: a
   member that would go through a symbolic link on disk is refused (unsafe_archive); a file
   where a folder is, or the reverse, fails (restore_failed).
   Either comes after the git steps of 3 but before any member is written.
5. Unpack the untracked files into the repo, then the agent files into HOME, every write made
   through a folder descriptor reached from the root one component at a time with O_NOFOLLOW:
   a link swapped in mid-restore is refused (unsafe_archive), never followed, so nothing is
   written outside the repo and HOME (short of another process moving a folder out after it
   was opened, where that process could write anyway). A failure in this step (such a race,
   an I/O error) leaves the members already unpacked in place, all inside the repo or HOME.
6. Hand everything under the repo and the conversation folders to the repo folder's owner
   (the agent, who cloned it) when that is not this process's user: the agent must own what it
   works on (Claude Code writes its conversation files 0600). The walk goes by folder
   descriptors (:func:`hangar.agent.fdtree.hand_over`): a link is handed over itself, never
   followed.

Standard output is one JSON line: ``{"ok": true, "warnings": [...], "seconds": {...}}`` (what
could not be put back as it was, and how long each step took: :data:`STEPS`) or ``{"ok": false, "code", "step", "error"}``
with code ``unsafe_archive`` or ``restore_failed``; the exit status is 0 or 3.
"""

import errno
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import time

from hangar.agent import fdtree, quiesce
from hangar.agent.gitsafe import GitError, Repo
from hangar.agent.paths import (
    clean_name, folders_rule, member_problem, private_folder, readable, untracked_rule,
)

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
SEALING_UNAVAILABLE = 5
"""The exit status when this sandbox cannot open a direct restore (hangar.agent's)."""
PARTS_VERIFIED = b"hangar: every part verified\n"
"""The control plane's line after the last part (:data:`hangar.checkpoints.restore.PARTS_VERIFIED`)."""
STEPS = ("agent", "receive", "check", "reset", "fetch", "checkout", "apply", "untar", "hand_over")
"""The steps timed in the answer's ``seconds``, in the order they run."""


class Clock:
    """Seconds spent in each step: ``lap(step)`` charges the time since the last lap to it."""

    def __init__(self):
        self.seconds = {}
        self.last = time.monotonic()

    def lap(self, step):
        now = time.monotonic()
        self.seconds[step] = round(self.seconds.get(step, 0.0) + now - self.last, 4)
        self.last = now


class Failure(Exception):
    def __init__(self, code, step, message):
        super().__init__(message)
        self.code, self.step, self.message = code, step, message


def unsafe(message, step="check"):
    return Failure("unsafe_archive", step, message)


def git(r, step, *args):
    """Run git through the safe repo; a failure is restore_failed at ``step``."""
    try:
        return r.run(*args).stdout
    except GitError as exc:
        raise Failure("restore_failed", step, str(exc)) from None


def read_exact(stream, size, out):
    remaining = size
    while remaining:
        chunk = stream.read(min(remaining, 1 << 20))
        if not chunk:
            raise Failure("restore_failed", "receive", "input ended early")
        (out.feed if isinstance(out, Inflater) else out.write)(chunk)
        remaining -= len(chunk)


class Budget:
    """What one restore may still write, uncompressed: the plan's ``max_bytes`` (absent: no
    cap). A restore past it stops with restore_failed, and the control plane tries an older
    checkpoint: a few kilobytes of compressed zeros must not become gigabytes on disk."""

    def __init__(self, limit):
        self.limit = limit
        self.spent = 0

    def spend(self, size, what):
        self.spent += size
        if self.limit is not None and self.spent > self.limit:
            raise Failure("restore_failed", "unpack", "%s takes the restore past its cap of %d "
                          "bytes uncompressed (HANGAR_SESSION_MAX_RESTORE_MB)"
                          % (what, self.limit))  # fmt: skip


ARCHIVES = ("untracked.tar", "agent.tar", "exchange.tar")
"""The parts that are archives: decompressed as they are received (:class:`Inflater`)."""


class Inflater:
    """Decompress one archive part into the plain tar ``plain`` as its bytes are received
    (``feed``), counted against ``budget``: zstd in a process of its own beside the receiving,
    gzip here. What goes wrong (a bad archive, the cap) is kept, and the rest of the part is
    read and dropped, so that :meth:`finish` only names it after the parts were vouched for."""

    def __init__(self, plain, compression, budget, label):
        self.budget, self.label = budget, label
        self.failure = None
        self.proc = self.drain = self.gz = None
        self.out = open(plain, "wb")
        if compression == "zstd":
            if not shutil.which("zstd"):
                self.failure = Failure("restore_failed", "unpack",
                                       "zstd is not installed in this sandbox")  # fmt: skip
                return
            import threading  # here: only a restore with a zstd archive needs it

            self.proc = subprocess.Popen(["zstd", "-q", "-d", "-c"], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
            self.drain = threading.Thread(target=self._drain, daemon=True)
            self.drain.start()
        elif compression == "gzip":
            import zlib

            self.zlib = zlib
            self.gz = zlib.decompressobj(16 + zlib.MAX_WBITS)

    def feed(self, chunk):
        if self.failure is not None:
            return
        if self.proc is not None:
            try:
                self.proc.stdin.write(chunk)
            except (BrokenPipeError, ValueError):  # zstd stopped: _drain or finish says why
                pass
        elif self.gz is not None:
            try:
                while chunk:
                    if self.gz.eof:  # a member ended before: the next one
                        self.gz = self.zlib.decompressobj(16 + self.zlib.MAX_WBITS)
                    self._put(self.gz.decompress(chunk, 1 << 20))
                    chunk = self.gz.unused_data if self.gz.eof else self.gz.unconsumed_tail
            except self.zlib.error as exc:
                self._fail(Failure("restore_failed", "unpack", "gzip: %s" % exc))
            except Failure as exc:
                self._fail(exc)
        else:
            try:
                self._put(chunk)
            except Failure as exc:
                self._fail(exc)

    def _put(self, data):
        if data:
            self.budget.spend(len(data), self.label)
            self.out.write(data)

    def _fail(self, failure):
        if self.failure is None:
            self.failure = failure
        if self.proc is not None:
            self.proc.kill()

    def _drain(self):
        try:
            while chunk := self.proc.stdout.read(1 << 20):
                self._put(chunk)
        except Failure as exc:
            self._fail(exc)
        except OSError as exc:
            self._fail(Failure("restore_failed", "unpack", "%s: %s" % (self.label, exc)))

    def finish(self):
        """End the part; returns what went wrong (a Failure) or None."""
        if self.proc is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            self.drain.join()
            err = self.proc.stderr.read()
            self.proc.stdout.close()
            self.proc.stderr.close()
            if self.proc.wait() != 0 and self.failure is None:
                self.failure = Failure("restore_failed", "unpack",
                                       "zstd: %s" % err.decode(errors="replace").strip())  # fmt: skip
        elif self.gz is not None and self.failure is None and not self.gz.eof:
            self.failure = Failure("restore_failed", "unpack", "gzip: the archive ends early")
        self.out.close()
        return self.failure


def receive(stream, part, path, budget):
    """Read part ``part`` (exactly its size) from ``stream``: an archive into its plain tar at
    ``path`` + ``.tar``, anything else to ``path``. Returns (the path written, what went wrong
    decompressing it or None)."""
    size = part["size"]
    if not part["name"].startswith(ARCHIVES):
        with open(path, "wb") as out:
            read_exact(stream, size, out)
        return path, None
    plain = path + ".tar"
    inflater = Inflater(plain, part.get("compression", "none"), budget, part["name"])
    try:
        read_exact(stream, size, inflater)
    finally:
        failure = inflater.finish()
    return plain, failure


def fetch_direct(grant, staging, budget):
    """A direct restore's step 1: the checkpoint's parts downloaded with the grant's signed
    URLs and every chunk verified (:func:`hangar.agent.direct.fetch`) into ``staging``, its
    trees as plain tars; returns their paths by the names :func:`restore` reads. Nothing
    outside staging is touched; any failure is restore_failed at ``receive``."""
    from hangar.agent import direct, sealed

    folder = os.path.join(staging, "parts")
    os.mkdir(folder, 0o700)
    try:
        fetched = direct.fetch(grant, folder, spend=budget.spend)
    except (sealed.Broken, OSError, ValueError) as exc:
        raise Failure("restore_failed", "receive", "the checkpoint did not download whole "
                      "and verified: %s" % exc) from None  # fmt: skip
    return {name + ".tar" if name in ("untracked", "agent", "exchange") else name: path
            for name, path in fetched.items()}  # fmt: skip


def tree_size(r, head):
    """The bytes a checkout of ``head`` writes (its blobs, as ``ls-tree -l`` sizes them)."""
    listing = git(r, "checkout", "ls-tree", "-r", "-l", "-z", "--full-tree", head)
    total = 0
    for entry in listing.split(b"\0"):
        fields = entry.split(None, 4)
        if len(fields) == 5 and fields[3].isdigit():
            total += int(fields[3])
    return total


def check_members(tar_path, label, rule):
    """Check every member of an archive by its own content, by the rules of
    :mod:`hangar.agent.paths`; return [(member, clean name)]."""
    try:
        with tarfile.open(tar_path, "r:") as tf:
            members = tf.getmembers()
    except (tarfile.TarError, OSError) as exc:
        raise Failure("restore_failed", "unpack", "%s: not a readable archive (%s)" % (label, exc))
    checked = []
    kinds = {}  # path -> "dir" | "file" | "link", as the members so far leave it
    for m in members:
        name = clean_name(m.name)
        if name is None:
            raise unsafe("%s: member %r is not a safe relative path" % (label, m.name))
        if not (m.isfile() or m.isdir() or m.issym()):
            kind = "hard link" if m.islnk() else "special file"
            raise unsafe("%s: member %r is a %s, which is refused" % (label, m.name, kind))
        why = member_problem(name, m.isdir(), m.linkname if m.issym() else None, rule)
        if why:
            raise unsafe("%s: member %r %s" % (label, m.name, why))
        parts = name.split("/")
        for i in range(1, len(parts)):
            prefix = "/".join(parts[:i])
            if kinds.get(prefix) in ("link", "file"):
                raise unsafe("%s: member %r is beneath the %s %r"
                             % (label, m.name, kinds[prefix], prefix))  # fmt: skip
            kinds[prefix] = "dir"
        kind = "dir" if m.isdir() else "link" if m.issym() else "file"
        before = kinds.get(name)
        if before == "link":
            # Anything landing on an earlier link would be made through it (chmod, mkdir).
            raise unsafe("%s: member %r has the name of an earlier link" % (label, m.name))
        if before is not None and (before == "dir") != (kind == "dir"):
            raise unsafe("%s: member %r turns a folder into a file or back" % (label, m.name))
        kinds[name] = kind
        checked.append((m, name))
    return checked


def check_on_disk(root, checked, label):
    """Refuse before writing anything when the tree on disk is already in the way. Unpacking
    repeats these checks without races; this pass only keeps a refusal from leaving an archive
    half unpacked in the usual case, where nothing else is changing the tree."""
    seen = set()
    for m, name in checked:
        parts = name.split("/")
        folders = len(parts) if m.isdir() else len(parts) - 1
        for i in range(1, folders + 1):
            rel = "/".join(parts[:i])
            if rel in seen:
                continue
            seen.add(rel)
            try:
                st = os.lstat(os.path.join(root, rel))
            except FileNotFoundError:
                break  # nothing beneath a missing folder is on disk either
            if stat.S_ISLNK(st.st_mode):
                raise unsafe("%s: member %r would pass through the link %r on disk"
                             % (label, m.name, rel))  # fmt: skip
            if not stat.S_ISDIR(st.st_mode):
                raise Failure("restore_failed", "unpack", "%s: member %r needs a folder where "
                              "the file %r is" % (label, m.name, rel))  # fmt: skip
        dest = os.path.join(root, name)
        if not m.isdir() and os.path.isdir(dest) and not os.path.islink(dest):
            raise Failure("restore_failed", "unpack", "%s: member %r would replace the folder "
                          "on disk" % (label, m.name))  # fmt: skip


def open_dir(parent, name, where, create):
    """Open folder ``name`` in the folder ``parent`` (a descriptor) without following a link,
    making it first when missing and ``create``. ``where`` names the path for messages."""
    for attempt in (1, 2):
        try:
            return os.open(name, DIR_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            if not create or attempt == 2:
                raise
            try:
                os.mkdir(name, 0o755, dir_fd=parent)
            except FileExistsError:
                pass  # made meanwhile by someone else: the second open decides
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            # O_NOFOLLOW|O_DIRECTORY fails on a link with ELOOP or ENOTDIR: look at what it is.
            try:
                is_file = stat.S_ISREG(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
            except OSError:
                is_file = False  # it changed again: something is racing us
            if is_file:
                raise Failure("restore_failed", "unpack", "%s is a file on disk, not a folder"
                              % where) from None  # fmt: skip
            raise unsafe("%s is a symbolic link on disk (or changed under the restore)" % where,
                         "unpack") from None  # fmt: skip


def walk(root_fd, parts, label, create=True):
    """A new descriptor of the folder ``parts`` beneath ``root_fd``, never through a link."""
    fd = os.dup(root_fd)
    try:
        for i, part in enumerate(parts):
            nxt = open_dir(fd, part, "%s: %r" % (label, "/".join(parts[: i + 1])), create)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def place(tf, parent, leaf, m):
    """Write file or link member ``m`` as ``leaf`` in folder ``parent``: made under a fresh
    name with O_EXCL|O_NOFOLLOW, then renamed over whatever was there (never opened)."""
    tmp = ".hangar-restore-" + os.urandom(8).hex()
    made = False
    try:
        if m.issym():
            os.symlink(m.linkname, tmp, dir_fd=parent)
            made = True
            os.utime(tmp, (m.mtime, m.mtime), dir_fd=parent, follow_symlinks=False)
        else:
            fd = os.open(tmp, FILE_FLAGS, 0o600, dir_fd=parent)
            made = True
            with os.fdopen(fd, "wb") as out:
                shutil.copyfileobj(tf.extractfile(m), out, 1 << 20)
                out.flush()
                os.fchmod(fd, m.mode & 0o777)  # no setuid/setgid/sticky bits
                os.utime(fd, (m.mtime, m.mtime))
        os.replace(tmp, leaf, src_dir_fd=parent, dst_dir_fd=parent)
        made = False
    finally:
        if made:
            try:
                os.unlink(tmp, dir_fd=parent)
            except OSError:
                pass


def extract(tar_path, root, checked, label):
    os.makedirs(root, exist_ok=True)  # the root itself comes from the control plane
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    dir_times = []
    name = None
    try:
        with tarfile.open(tar_path, "r:") as tf:
            for m, name in checked:
                parts = name.split("/")
                parent = walk(root_fd, parts[:-1], label)
                try:
                    if m.isdir():
                        fd = open_dir(parent, parts[-1], "%s: %r" % (label, name), True)
                        try:
                            os.fchmod(fd, (m.mode & 0o777) | 0o700)
                        finally:
                            os.close(fd)
                        dir_times.append((parts, m.mtime))
                    else:
                        place(tf, parent, parts[-1], m)
                finally:
                    os.close(parent)
        # Folder times last, deepest first: writing inside a folder changes its time.
        for parts, mtime in reversed(dir_times):
            name = "/".join(parts)
            fd = walk(root_fd, parts, label, create=False)
            try:
                os.utime(fd, (mtime, mtime))
            finally:
                os.close(fd)
    except (OSError, tarfile.TarError) as exc:
        raise Failure("restore_failed", "unpack", "%s: %r: %s" % (label, name, exc)) from None
    finally:
        os.close(root_fd)


def restore(plan, staging, clock):
    """Restore the plan's checkpoint; returns the warnings (what could not be put back as it
    was, and what stands in for it). Each step's time goes to ``clock``."""
    repo, home = plan["repo"], plan["home"]
    end_agent_processes()
    clock.lap("agent")
    warnings = []
    budget = Budget(plan.get("max_bytes"))
    paths = {}
    failures = []
    if plan.get("direct") is not None:
        paths = fetch_direct(plan["direct"], staging, budget)
    for part in plan.get("parts") or ():
        if "/" in part["name"] or part["name"] in ("", ".", ".."):
            raise Failure("restore_failed", "receive", "bad part name %r" % part["name"])
        path, failure = receive(sys.stdin.buffer, part, os.path.join(staging, part["name"]),
                                budget)  # fmt: skip
        paths[part["name"]] = path
        failures += [failure] if failure else []
    if plan.get("direct") is None and sys.stdin.buffer.readline(len(PARTS_VERIFIED)) != PARTS_VERIFIED:
        raise Failure("restore_failed", "receive", "the parts were not vouched for: their "
                      "stream ended before the control plane's closing line")  # fmt: skip
    clock.lap("receive")
    if failures:  # only now: a part not vouched for is refused as such, whatever it holds
        raise failures[0]

    conversation_dirs = [clean_name(d) for d in plan.get("conversation_dirs") or []]
    exchange = [d for d in [clean_name(plan.get("exchange_dir") or "")] if d]
    rules = {"untracked": untracked_rule,
             "agent": folders_rule([d for d in conversation_dirs if d], "conversation folders"),
             "exchange": folders_rule(exchange, "exchange folder")}
    archives = []
    for kind, root in (("untracked", repo), ("agent", home), ("exchange", home)):
        found = [n for n in paths if n.startswith(kind + ".tar")]
        if found:
            plain = paths[found[0]]
            archives.append((found[0], root, plain, check_members(plain, found[0], rules[kind])))
    clock.lap("check")

    try:
        r = Repo(repo, os.path.join(staging, "git-scratch"))
    except GitError as exc:
        raise Failure("restore_failed", "reset", exc.message) from None
    # A fresh clone has nothing to undo: the head is checked out over it as a switch, which
    # looks only at the paths that differ. Should git refuse (the tree was not fresh after
    # all), the reset and clean come first as for any other tree.
    fresh = bool(plan.get("fresh")) and first_restore(plan.get("tmp"))
    if not fresh:
        reset(r, repo)
    clock.lap("reset")
    head = plan["head"]
    if "repo.bundle" in paths:
        bundle = paths["repo.bundle"]
        # Not -q: with it, git says nothing about missing prerequisites.
        git(r, "bundle", "bundle", "verify", bundle)
        git(r, "fetch", "fetch", "-q", "--no-tags", bundle,
            "refs/hangar/checkpoint:refs/hangar/checkpoint")  # fmt: skip
    clock.lap("fetch")
    if r.run("cat-file", "-e", head + "^{commit}", check=False).returncode != 0:
        raise Failure("restore_failed", "checkout", "head %s is not in the repo" % head)
    budget.spend(tree_size(r, head), "the head commit's tree")
    if not (fresh and r.run("checkout", "-q", "--detach", head, check=False).returncode == 0):
        if fresh:
            reset(r, repo)
        check_out(r, staging, head, warnings)
    clock.lap("checkout")
    # staged.patch is head -> index: applied to the index alone it stages exactly what was
    # staged, ignored files included. wip.patch (head -> working tree) then fills the tree.
    staged = paths.get("staged.patch")
    if staged and os.path.getsize(staged) > 0:
        applied = r.run("apply", "--cached", "--binary", "--whitespace=nowarn", staged,
                        check=False)  # fmt: skip
        if applied.returncode != 0:  # what was staged is lost as staged, not as work
            warnings.append("what was staged could not be staged again (git apply: %s); the "
                            "changes are in the working tree, unstaged"
                            % applied.stderr.decode(errors="replace").strip()[:500])  # fmt: skip
    if "wip.patch" in paths and os.path.getsize(paths["wip.patch"]) > 0:
        git(r, "apply", "apply", "--binary", "--whitespace=nowarn", paths["wip.patch"])
    try:
        set_branch(r, plan.get("branch"), head, warnings)
        r.write_back_index()
    except (GitError, OSError) as exc:
        raise Failure("restore_failed", "checkout", str(exc)) from None
    clock.lap("apply")

    folders = [d for d in conversation_dirs + exchange if d]
    for label, root, plain, checked in archives:
        if root == home:
            folders += folders_written(checked)
    warnings += clear_links_in_home(home, folders)
    for label, root, plain, checked in archives:
        check_on_disk(root, checked, label)
    for label, root, plain, checked in archives:
        extract(plain, root, checked, label)
    clock.lap("untar")
    owner = os.lstat(repo)
    if owner.st_uid != os.geteuid():
        tops = [repo] + [os.path.join(home, d) for d in conversation_dirs + exchange if d]
        hand_over(home, tops, owner.st_uid, owner.st_gid)
    clock.lap("hand_over")
    return warnings


def check_out(r, staging, head, warnings):
    """Check ``head`` out. When git refuses (a tree the agent built by hand can hold paths such
    as ``.GIT/hooks/x``), the tree is checked out less the paths git refuses, each named, and
    HEAD is set to ``head`` all the same: the checkpoint left those paths out of its patches."""
    done = r.run("checkout", "-q", "-f", "--detach", head, check=False)
    if done.returncode == 0:
        return
    index = os.path.join(staging, "checkout-index")
    try:
        refused = r.checkout_index(head, index)
        tree = r.run("write-tree", env={"GIT_INDEX_FILE": index}).stdout.decode().strip()
        r.run("read-tree", "-u", "--reset", tree)
        r.pin_head(head)
    except GitError as exc:
        raise Failure("restore_failed", "checkout", "%s (and without the paths it refuses: %s)"
                      % (done.stderr.decode(errors="replace").strip(), exc)) from None  # fmt: skip
    if refused:
        more = " and %d more" % (len(refused) - 8) if len(refused) > 8 else ""
        warnings.append("paths git refuses to check out were left out of the working tree: "
                        + ", ".join(refused[:8]) + more)


def set_branch(r, branch, head, warnings):
    """Put the repo's HEAD on ``branch`` at ``head``, or detached at ``head`` when there is no
    branch or git refuses it (a name that clashes with a branch of the fresh clone: ``main/x``
    beside ``main``), with a warning."""
    if branch:
        try:
            r.update_repo_ref("refs/heads/" + branch, head)
            r.set_repo_head("refs/heads/" + branch)
            return
        except GitError as exc:
            warnings.append("HEAD is left detached at %s: git refused the branch %r (%s)"
                            % (head, branch, exc.message[:300]))  # fmt: skip
    r.set_repo_head(head)


def end_agent_processes():
    """End every process of the agent's before anything is touched (:mod:`quiesce`): the
    restore walks the agent's trees as hangar's user, and a process left running (one the
    environment's setup started) could swap a folder for a link under it."""
    try:
        quiesce.end_agent_processes()
    except (quiesce.StillRunning, OSError) as exc:
        raise Failure("restore_failed", "agent", str(exc)) from None


def reset(r, repo):
    """``git reset --hard`` and :func:`clean`: the tree as the repo's HEAD has it."""
    git(r, "reset", "reset", "--hard", "-q")
    clean(r, repo)


def clean(r, repo):
    """``git clean -fd`` by folder descriptors (:func:`fdtree.remove_untracked`): git lists
    what it would remove, and the removal never follows a link, where git's own walk goes by
    path names and would follow a folder swapped for a link meanwhile."""
    files = git(r, "clean", "ls-files", "-z", "--others", "--exclude-standard")
    folders = git(r, "clean", "ls-files", "-z", "--others", "--exclude-standard", "--directory")
    try:
        fdtree.remove_untracked(repo, files.split(b"\0"), folders.split(b"\0"))
    except OSError as exc:
        raise Failure("restore_failed", "clean", "removing untracked files: %s" % exc) from None


def folders_written(checked):
    """The folders (relative to the root) that the checked members of an archive write or
    pass through, each once."""
    out = set()
    for m, name in checked:
        parts = name.split("/")
        out.add("/".join(parts if m.isdir() else parts[:-1]))
    out.discard("")
    return sorted(out)


def clear_links_in_home(home, folders):
    """Remove every link standing where a folder of ``folders`` (relative to HOME), or one on
    the way to it, goes: it can only be the agent's or its setup's (a fresh sandbox's HOME holds
    what its setup made), and unpacking would refuse to go through it, every time. The link
    itself goes, never its target. Returns a warning naming the links removed, if any."""
    removed = []
    for folder in folders:
        try:
            # Beneath a link removed, nothing is left on disk: one call clears the way.
            link = fdtree.remove_link_on_path(home, folder.split("/"))
        except OSError as exc:
            raise Failure("restore_failed", "unpack", "clearing the way to %s: %s"
                          % (folder, exc)) from None  # fmt: skip
        if link:
            removed.append(link)
    if not removed:
        return []
    shown = ", ".join("~/" + readable(link) for link in removed[:5])
    more = " and %d more" % (len(removed) - 5) if len(removed) > 5 else ""
    return ["links in HOME stood where the checkpoint's folders go: %s%s; each link was removed "
            "(never what it pointed to) and the checkpoint's folder restored in its place"
            % (shown, more)]  # fmt: skip


def hand_over(home, tops, uid, gid):
    """Make ``uid:gid`` own every entry under each of ``tops`` and the folders between HOME and
    them, by folder descriptors (:func:`fdtree.hand_over`): a link is handed over itself, never
    followed, whatever changes during the walk."""
    for top in map(os.path.normpath, tops):
        rel = os.path.relpath(top, home)
        try:
            if rel.startswith(".."):  # the repo: its own folder and everything in it
                fdtree.hand_over(os.path.dirname(top), [os.path.basename(top)], uid, gid)
            else:  # in HOME: with the folders restore may have made on the way
                fdtree.hand_over(home, rel.split("/"), uid, gid, parents=True)
        except OSError as exc:
            raise Failure("restore_failed", "owner", "cannot hand %s to the agent: %s"
                          % (top, exc)) from None  # fmt: skip


RESTORE_BEGUN = "restore-begun"


def first_restore(tmp):
    """True for the first restore ever begun in this sandbox, which marks it so in hangar's own
    folder ``tmp`` (0700, hangar's): a restore retried after a crash, or one after a fallback,
    finds the mark and never takes the tree for a fresh clone, whatever the plan says. False
    where there is no such folder to mark."""
    if not private_folder(tmp):
        return False
    try:
        os.close(os.open(os.path.join(tmp, RESTORE_BEGUN),
                         os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))  # fmt: skip
    except OSError:  # begun before (or unmarkable): not fresh
        return False
    return True


def main():
    staging = None
    try:
        plan = json.loads(sys.stdin.buffer.readline())
        if plan.get("direct") is not None:
            from hangar.agent import sealed

            try:
                sealed.require()
            except sealed.Unavailable as exc:
                sys.stderr.write("cannot open checkpoints in this sandbox: %s\n" % exc)
                sys.exit(SEALING_UNAVAILABLE)
        tmp = plan.get("tmp")
        if not tmp or not os.path.isdir(tmp):
            tmp = None  # a sandbox without a folder of hangar's own
        staging = tempfile.mkdtemp(prefix=".hangar-restore-", dir=tmp)
        clock = Clock()
        result = {"ok": True, "warnings": restore(plan, staging, clock), "seconds": clock.seconds}
    except Failure as exc:
        result = {"ok": False, "code": exc.code, "step": exc.step, "error": exc.message}
    except Exception as exc:  # the answer must stay one JSON line, whatever went wrong
        result = {"ok": False, "code": "restore_failed", "step": "internal",
                  "error": "%s: %s" % (type(exc).__name__, exc)}  # fmt: skip
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    if staging:
        remove_later(staging)
    sys.exit(0 if result["ok"] else 3)


def remove_later(staging):
    """Remove the staging folder after the answer, in a child of its own with this process's
    standard streams closed, so that the exec waiting for the answer does not wait for it too
    (removing the parts' tens of megabytes from hangar's scratch volume, mounted with discard,
    took 30 to 50 ms); here when no child can be made."""
    try:
        pid = os.fork()
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        return
    if pid == 0:
        try:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            shutil.rmtree(staging, ignore_errors=True)
        finally:
            os._exit(0)


if __name__ == "__main__":
    main()
