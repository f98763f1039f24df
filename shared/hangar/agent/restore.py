"""Restore a checkpoint inside a fresh sandbox. Standard library only; run as
``python3 -I -S -c SRC`` with the checkpoint on standard input.

Standard input is one JSON line (the plan) followed by the bytes of each part it lists, in
order, each exactly ``size`` bytes::

    repo, home          where the repo and HOME are
    branch, head        check out ``branch`` at ``head`` (detached when branch is null)
    conversation_dirs   folders relative to HOME that agent.tar.* may write (absent: none)
    exchange_dir        the folder relative to HOME that exchange.tar.* may write (absent: none)
    tmp                 hangar's own scratch folder (absent: the system's temporary folder)
    parts               [{"name", "size", "compression"}]: any of repo.bundle, staged.patch,
                        wip.patch, untracked.tar.*, agent.tar.*, exchange.tar.*

Steps, in order:

0. End every process of the sandbox's agent (:mod:`hangar.agent.quiesce`; restore_failed at
   step ``agent`` if one outlives ten seconds): no process the environment's setup left running
   can change the trees while the steps below walk them as hangar's user.
1. Receive the parts into a private staging folder (removed at the end).
2. Check every archive by its content alone: each member is a relative path without ``..``;
   a file, folder or symbolic link (no hard links, devices, FIFOs); not an earlier link member
   nor beneath one; not a file where an earlier member put a folder, or the reverse. Untracked
   members have no ``.git`` component; agent members lie under one of ``conversation_dirs`` (or
   are its folder). A link's target is relative, stays inside the root once normalised, has no
   ``..`` after a normal component (so chained links cannot climb out) and obeys the same
   ``.git``/conversation rule. A refusal here comes before the repo or HOME is touched.
3. git, through :mod:`hangar.agent.gitsafe` (nothing the repo's config names runs): reset
   --hard, clean -fd (git lists the untracked files, :mod:`hangar.agent.fdtree` removes them
   by folder descriptors, never through a link), verify and fetch repo.bundle, check out,
   apply staged.patch to the index only, then wip.patch (head to working tree) to the working
   tree; then the repo's branch, HEAD and index are set to the result.
4. Remove a link standing where a conversation or exchange folder goes in HOME, or on the way
   to it (a fresh sandbox's HOME holds only what its setup made; the link goes, never what it
   points to). Check the tree on disk: a member that would go through a symbolic link on disk is
   refused (unsafe_archive); a file where a folder is, or the reverse, fails (restore_failed).
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

Standard output is one JSON line: ``{"ok": true}`` or ``{"ok": false, "code", "step", "error"}``
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

from hangar.agent import fdtree, quiesce
from hangar.agent.gitsafe import GitError, Repo
from hangar.agent.paths import clean_name, folders_rule, member_problem, untracked_rule

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


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
        out.write(chunk)
        remaining -= len(chunk)


def decompress(path, compression):
    """Return the path of the plain tar of a compressed archive."""
    plain = path + ".tar"
    with open(path, "rb") as src, open(plain, "wb") as out:
        if compression == "zstd":
            if not shutil.which("zstd"):
                raise Failure("restore_failed", "unpack", "zstd is not installed in this sandbox")
            proc = subprocess.run(["zstd", "-q", "-d", "-c"], stdin=src, stdout=out,
                                  stderr=subprocess.PIPE)  # fmt: skip
            if proc.returncode != 0:
                raise Failure("restore_failed", "unpack", "zstd: %s" % proc.stderr.decode().strip())
        elif compression == "gzip":
            import gzip
            import zlib

            try:
                with gzip.GzipFile(fileobj=src) as gz:
                    shutil.copyfileobj(gz, out, 1 << 20)
            except (OSError, EOFError, zlib.error) as exc:
                raise Failure("restore_failed", "unpack", "gzip: %s" % exc) from None
        else:
            shutil.copyfileobj(src, out, 1 << 20)
    return plain


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


def restore(plan, staging):
    repo, home = plan["repo"], plan["home"]
    end_agent_processes()
    paths = {}
    for part in plan["parts"]:
        if "/" in part["name"] or part["name"] in ("", ".", ".."):
            raise Failure("restore_failed", "receive", "bad part name %r" % part["name"])
        path = os.path.join(staging, part["name"])
        with open(path, "wb") as out:
            read_exact(sys.stdin.buffer, part["size"], out)
        paths[part["name"]] = (path, part.get("compression", "none"))

    conversation_dirs = [clean_name(d) for d in plan.get("conversation_dirs") or []]
    exchange = [d for d in [clean_name(plan.get("exchange_dir") or "")] if d]
    rules = {"untracked": untracked_rule,
             "agent": folders_rule([d for d in conversation_dirs if d], "conversation folders"),
             "exchange": folders_rule(exchange, "exchange folder")}
    archives = []
    for kind, root in (("untracked", repo), ("agent", home), ("exchange", home)):
        found = [n for n in paths if n.startswith(kind + ".tar")]
        if found:
            path, compression = paths[found[0]]
            plain = decompress(path, compression)
            archives.append((found[0], root, plain, check_members(plain, found[0], rules[kind])))

    try:
        r = Repo(repo, os.path.join(staging, "git-scratch"))
    except GitError as exc:
        raise Failure("restore_failed", "reset", exc.message) from None
    git(r, "reset", "reset", "--hard", "-q")
    clean(r, repo)
    head = plan["head"]
    if "repo.bundle" in paths:
        bundle = paths["repo.bundle"][0]
        # Not -q: with it, git says nothing about missing prerequisites.
        git(r, "bundle", "bundle", "verify", bundle)
        git(r, "fetch", "fetch", "-q", "--no-tags", bundle,
            "refs/hangar/checkpoint:refs/hangar/checkpoint")  # fmt: skip
    if r.run("cat-file", "-e", head + "^{commit}", check=False).returncode != 0:
        raise Failure("restore_failed", "checkout", "head %s is not in the repo" % head)
    git(r, "checkout", "checkout", "-q", "-f", "--detach", head)
    # staged.patch is head -> index: applied to the index alone it stages exactly what was
    # staged, ignored files included. wip.patch (head -> working tree) then fills the tree.
    for part, where in (("staged.patch", ["--cached"]), ("wip.patch", [])):
        if part in paths and os.path.getsize(paths[part][0]) > 0:
            git(r, "apply", "apply", *where, "--binary", "--whitespace=nowarn", paths[part][0])
    try:
        if plan.get("branch"):
            r.update_repo_ref("refs/heads/" + plan["branch"], head)
            r.set_repo_head("refs/heads/" + plan["branch"])
        else:
            r.set_repo_head(head)
        r.write_back_index()
    except (GitError, OSError) as exc:
        raise Failure("restore_failed", "checkout", str(exc)) from None

    clear_links_in_home(home, [d for d in conversation_dirs + exchange if d])
    for label, root, plain, checked in archives:
        check_on_disk(root, checked, label)
    for label, root, plain, checked in archives:
        extract(plain, root, checked, label)
    owner = os.lstat(repo)
    if owner.st_uid != os.geteuid():
        tops = [repo] + [os.path.join(home, d) for d in conversation_dirs + exchange if d]
        hand_over(home, tops, owner.st_uid, owner.st_gid)


def end_agent_processes():
    """End every process of the agent's before anything is touched (:mod:`quiesce`): the
    restore walks the agent's trees as hangar's user, and a process left running (one the
    environment's setup started) could swap a folder for a link under it."""
    try:
        quiesce.end_agent_processes()
    except (quiesce.StillRunning, OSError) as exc:
        raise Failure("restore_failed", "agent", str(exc)) from None


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


def clear_links_in_home(home, folders):
    """Remove a link standing where a folder of ``folders`` (relative to HOME), or one on the
    way to it, goes: it can only be the agent's (a fresh sandbox's HOME holds what its setup
    made), and unpacking would refuse to go through it. The link itself goes, never its target."""
    for folder in folders:
        try:
            fdtree.remove_link_on_path(home, folder.split("/"))
        except OSError as exc:
            raise Failure("restore_failed", "unpack", "clearing the way to %s: %s"
                          % (folder, exc)) from None  # fmt: skip


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


def main():
    staging = None
    try:
        plan = json.loads(sys.stdin.buffer.readline())
        tmp = plan.get("tmp")
        if not tmp or not os.path.isdir(tmp):
            tmp = None  # a sandbox without a folder of hangar's own
        staging = tempfile.mkdtemp(prefix=".hangar-restore-", dir=tmp)
        restore(plan, staging)
        result = {"ok": True}
    except Failure as exc:
        result = {"ok": False, "code": exc.code, "step": exc.step, "error": exc.message}
    except Exception as exc:  # the answer must stay one JSON line, whatever went wrong
        result = {"ok": False, "code": "restore_failed", "step": "internal",
                  "error": "%s: %s" % (type(exc).__name__, exc)}  # fmt: skip
    finally:
        if staging:
            shutil.rmtree(staging, ignore_errors=True)
    sys.stdout.write(json.dumps(result) + "\n")
    sys.exit(0 if result["ok"] else 3)


if __name__ == "__main__":
    main()
