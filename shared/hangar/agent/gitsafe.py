"""git on the agent's repo, run by hangar's tools, running nothing the repo names.

A repo's config can make git run programs: hooks, ``core.fsmonitor``, clean, smudge and process
filters, textconv, diff and merge drivers, ``core.sshCommand``, a pager. The agent writes that
config (``.git/config``, and ``~/.gitconfig``, which is in its HOME), so hangar's git, which has
capabilities over the agent's files, must never read it. :class:`Repo` therefore runs git with:

- a private git folder of its own (``GIT_DIR``) in hangar's scratch space: a config written
  here (only the repo's object format is carried over), HEAD pinned to the commit the repo's
  HEAD names, a copy of the repo's index and ``info/exclude``, refs of its own; never the
  repo's ``shallow`` file (hangar's clones are whole, and a ``shallow`` the agent wrote would
  make a bundle stop short of what a restore needs), nor its commit graph or bitmaps;
- the repo's objects (``GIT_OBJECT_DIRECTORY``) and working tree (``GIT_WORK_TREE``);
- no system config, a global config of its own (``safe.directory``, so the agent owning the
  repo is no reason to refuse it), HOME and XDG_CONFIG_HOME in the scratch space, and hooks and
  fsmonitor turned off on the command line as well.

In-tree ``.gitattributes`` still name filters and drivers, but none is defined, so none runs.
The repo's own refs and HEAD are read here, from the files (loose refs, then packed-refs);
:meth:`Repo.update_repo_ref` and :meth:`Repo.set_repo_head` write them with git plumbing that
runs nothing but hooks, which are off.

Standard library only: this module is shipped into sandboxes with the scripts that import it.
It imports only ``os``, ``select`` and ``stat`` up front (``subprocess`` costs more than a
quick checkpoint's whole budget on a small machine): :meth:`Repo.capture` runs git with
``posix_spawn``, and ``subprocess`` is imported by the calls that stream.
"""

import errno
import os
import select
import stat

COMMAND_LINE = [
    "-c", "core.hooksPath=/dev/null",
    "-c", "core.fsmonitor=false",
    "-c", "core.quotepath=false",
    "-c", "diff.noprefix=false",
    "-c", "diff.mnemonicPrefix=false",
    "-c", "diff.external=",
    "-c", "core.sshCommand=false",
    "-c", "core.pager=cat",
    # Files the agent can write that would make git skip objects it must walk: a lying commit
    # graph or reachability bitmap would make a bundle leave commits out.
    "-c", "core.commitGraph=false",
    "-c", "pack.useBitmaps=false",
    "-c", "core.multiPackIndex=false",
]  # fmt: skip
GLOBAL_CONFIG = "[safe]\n\tdirectory = *\n[core]\n\thooksPath = /dev/null\n\tfsmonitor = false\n"
PIPE = -1
SPLIT_INDEX_MAX = 1 << 28  # a split index or its shared index larger than this is not copied


class GitError(Exception):
    """A git command failed: ``command`` is its subcommand, ``message`` what git said."""

    def __init__(self, command, message):
        super().__init__("git %s: %s" % (command, message))
        self.command, self.message = command, message


def read_small(path, limit=1 << 20):
    """The bytes of a regular file (never through a link), or None when there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a link
            return None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, limit)
    finally:
        os.close(fd)


def copy_regular(src, dst, limit=None):
    """Copy a regular file (never through a link) with its times; False when there is none (or
    it is over ``limit`` bytes).

    The times matter for the index: git treats an entry as racily clean (and hashes the file)
    by comparing it with the index file's mtime, so a copy must keep the original's."""
    try:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (limit is not None and st.st_size > limit):
            return False
        out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            while chunk := os.read(fd, 1 << 20):
                os.write(out, chunk)
            os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))
        finally:
            os.close(out)
        return True
    finally:
        os.close(fd)


def index_entries(data, hash_len):
    """The ``(flags, extended flags, mode)`` of each entry of the index of version 2 to 4 in
    ``data`` (extended flags 0 where an entry has none), then ``(None, offset, None)`` of its
    extensions. Raises ValueError when ``data`` is no such index (IndexError when it is cut
    short)."""
    if data[:4] != b"DIRC" or len(data) < 12 + hash_len:
        raise ValueError("not an index")
    version = int.from_bytes(data[4:8], "big")
    if version not in (2, 3, 4):
        raise ValueError("index version %d" % version)
    pos, fixed = 12, 40 + hash_len + 2  # times, dev, ino, mode, uid, gid, size; oid; flags
    for _ in range(int.from_bytes(data[8:12], "big")):
        flags = int.from_bytes(data[pos + fixed - 2:pos + fixed], "big")
        name = pos + fixed
        extended = 0
        if flags & 0x4000:
            extended = int.from_bytes(data[name:name + 2], "big")
            name += 2
        yield flags, extended, int.from_bytes(data[pos + 24:pos + 28], "big")
        if version == 4:  # a varint (the prefix to strip), then the rest of the name
            while data[name] & 0x80:
                name += 1
            pos = data.index(b"\0", name + 1) + 1
        else:  # the name, NUL-padded to a multiple of 8
            pos += (data.index(b"\0", name) - pos + 8) & ~7
    yield None, pos, None


def linked_shared_index(path, hash_len, limit=SPLIT_INDEX_MAX):
    """The name (hex) of the shared index the split index at ``path`` links to (its ``link``
    extension, written by ``git update-index --split-index``), or None when it links to none or
    cannot be read as an index of version 2 to 4 (then git judges it)."""
    data = read_small(path, limit)
    try:
        *_, (_, pos, _) = index_entries(data or b"", hash_len)
        end = len(data) - hash_len  # the trailing checksum
        while pos + 8 <= end:
            size = int.from_bytes(data[pos + 4:pos + 8], "big")
            if data[pos:pos + 4] == b"link" and size >= hash_len:
                return data[pos + 8:pos + 8 + hash_len].hex()
            pos += 8 + size
    except (ValueError, IndexError):
        return None
    return None


def index_marks(path, hash_len):
    """``(hides, gitlinks)`` of the index at ``path``: whether an entry is marked
    assume-unchanged or skip-worktree, and whether an entry is a gitlink (a nested repository
    held as a commit: a submodule, or a repository ``git add``-ed whole). Both True when the
    index cannot be scanned (then git is asked)."""
    hides = gitlinks = False
    try:
        for flags, extended, mode in index_entries(read_small(path, 1 << 30) or b"", hash_len):
            if flags is not None:
                hides = hides or bool(flags & 0x8000 or extended & 0x4000)
                gitlinks = gitlinks or mode & 0o170000 == 0o160000
    except (ValueError, IndexError):
        return True, True
    return hides, gitlinks


def object_format(config):
    """The ``extensions.objectformat`` of a git config's text ("sha1" when it names none)."""
    section = None
    for raw in config.splitlines():
        line = raw.split("#", 1)[0].split(";", 1)[0].strip()
        if line.startswith("["):
            section = line.strip("[] \t").lower()
        elif section == "extensions" and "=" in line:
            key, _, value = line.partition("=")
            if key.strip().lower() == "objectformat" and value.strip():
                return value.strip().lower()
    return "sha1"


def remove_tree(path):
    """Remove a folder of ours and everything in it, never following a link."""
    try:
        for root, dirs, files in os.walk(path, topdown=False):
            for name in files:
                os.unlink(os.path.join(root, name))
            for name in dirs:
                full = os.path.join(root, name)
                if os.path.islink(full):
                    os.unlink(full)
                else:
                    os.rmdir(full)
        os.rmdir(path)
    except FileNotFoundError:
        pass


# What git's checkout refuses to write (its verify_path, with core.protectNTFS on, as it is by
# default): a path component that is empty, "." or "..", or that names the git folder in any
# case or NTFS spelling (".git", ".git.", ".git ", "git~1", ".git::$INDEX_ALLOCATION"); and a
# link named .gitmodules. Git itself is the judge (see Repo.checkout_index); this only spares
# it most of the rounds.
_DOT_GIT_NAMES = (".git", "git~1")


def checkout_refuses(path, is_link=False):
    """True when git would refuse to check ``path`` out (a first guess: git decides)."""
    parts = path.split("/")
    for part in parts:
        if part in ("", ".", ".."):
            return True
        low = part.lower()
        if low.rstrip(". ") in _DOT_GIT_NAMES or low.startswith(".git:"):
            return True
    return is_link and parts[-1].lower().rstrip(". ") in (".gitmodules", "gitmod~1")


def branch_problem(name):
    """Why git would refuse to make branch ``name`` (git-check-ref-format(1)), or None."""
    if not name or name == "HEAD" or name.startswith("-") or name == "@":
        return "is not a branch name git accepts"
    bad = set(" ~^:?*[\\\x7f")
    if any(c in bad or c < " " or "\ud800" <= c <= "\udfff" or c == "\ufffd" for c in name):
        return "holds a character git refuses in a branch name"
    if any(s in name for s in ("..", "@{", "//")):
        return "holds a sequence git refuses in a branch name"
    if name.endswith(("/", ".")) or name.startswith("/"):
        return "starts or ends in a way git refuses"
    for part in name.split("/"):
        if part.startswith(".") or part.endswith(".lock"):
            return "has a part git refuses (starting with '.' or ending in '.lock')"
    return None


class Repo:
    """The repo at ``worktree`` as hangar's git sees it, with its private git folder under
    ``scratch`` (a folder of hangar's that the caller removes)."""

    def __init__(self, worktree, scratch):
        self.worktree = worktree
        self.gitdir = os.path.join(worktree, ".git")
        try:
            st = os.lstat(self.gitdir)
        except FileNotFoundError:
            raise GitError("init", "%s is not a git checkout" % worktree) from None
        if not stat.S_ISDIR(st.st_mode):
            raise GitError("init", "%s/.git is not a folder" % worktree)
        self.scratch = scratch
        self._marks = None
        self.shadow = os.path.join(scratch, "git")
        self.head_ref, self.head = self._read_head()
        self._build()

    # -- the repo's own refs, read from the files --------------------------------------------

    def _read_head(self):
        raw = read_small(os.path.join(self.gitdir, "HEAD"))
        if raw is None:
            raise GitError("init", "the repo has no HEAD")
        text = raw.decode(errors="replace").strip()
        if text.startswith("ref:"):
            ref = text[4:].strip()
            return ref, self.resolve(ref)
        return None, text or None

    def resolve(self, ref, depth=0):
        """The commit a ref of the repo names (loose, then packed, following ``ref:``), or
        None when it does not exist."""
        if depth > 5 or ".." in ref.split("/") or ref.startswith("/"):
            return None
        raw = read_small(os.path.join(self.gitdir, ref))
        if raw is not None:
            text = raw.decode(errors="replace").strip()
            if text.startswith("ref:"):
                return self.resolve(text[4:].strip(), depth + 1)
            return text or None
        packed = read_small(os.path.join(self.gitdir, "packed-refs"), 1 << 28)
        for line in (packed or b"").decode(errors="replace").splitlines():
            if line[:1] in ("#", "^"):
                continue
            sha, _, name = line.partition(" ")
            if name == ref:
                return sha
        return None

    @property
    def branch(self):
        """The branch HEAD is on, or None when it is detached."""
        if self.head_ref and self.head_ref.startswith("refs/heads/"):
            return self.head_ref[len("refs/heads/"):]
        return None

    # -- the private git folder ------------------------------------------------------------

    def _build(self):
        os.makedirs(os.path.join(self.shadow, "refs"), exist_ok=True)
        os.makedirs(os.path.join(self.shadow, "info"), exist_ok=True)
        config = (read_small(os.path.join(self.gitdir, "config")) or b"").decode(errors="replace")
        fmt = object_format(config)
        lines = ["[core]", "\trepositoryformatversion = %d" % (0 if fmt == "sha1" else 1),
                 "\tbare = false", "\tlogallrefupdates = false", "[gc]", "\tauto = 0",
                 "[maintenance]", "\tauto = false"]  # fmt: skip
        if fmt != "sha1":
            lines += ["[extensions]", "\tobjectformat = %s" % fmt]
        with open(os.path.join(self.shadow, "config"), "w") as f:
            f.write("\n".join(lines) + "\n")
        with open(os.path.join(self.shadow, "HEAD"), "w") as f:
            f.write("%s\n" % (self.head or "0" * 40))
        copy_regular(os.path.join(self.gitdir, "index"), os.path.join(self.shadow, "index"))
        self._copy_shared_index(fmt)
        copy_regular(os.path.join(self.gitdir, "info/exclude"),
                     os.path.join(self.shadow, "info/exclude"))  # fmt: skip
        with open(os.path.join(self.scratch, "gitconfig"), "w") as f:
            f.write(GLOBAL_CONFIG)

    def _copy_shared_index(self, fmt):
        """With a split index, copy the shared index it links to (``sharedindex.<hash>`` beside
        it, a regular file under SPLIT_INDEX_MAX bytes): git cannot read the index without it.
        When it cannot be copied git fails to read the index, and :meth:`fresh_index` is the
        caller's way out."""
        try:
            split = any(name.startswith("sharedindex.") for name in os.listdir(self.gitdir))
        except OSError:
            return
        if not split:
            return
        index = os.path.join(self.shadow, "index")
        name = linked_shared_index(index, 32 if fmt == "sha256" else 20)
        if name:
            name = "sharedindex." + name
            copy_regular(os.path.join(self.gitdir, name), os.path.join(self.shadow, name),
                         SPLIT_INDEX_MAX)  # fmt: skip

    def fresh_index(self):
        """Replace the private index with one read from HEAD: for an index git cannot read (a
        shared index that is gone, an extension it does not know, garbage). What was staged is
        then only in the working tree. Raises GitError when HEAD's tree cannot be read."""
        for name in os.listdir(self.shadow):
            if name == "index" or name.startswith("sharedindex."):
                os.unlink(os.path.join(self.shadow, name))
        self._marks = None
        self.run("read-tree", self.head)

    def index_marks(self):
        """:func:`index_marks` of the private index, scanned once (clearing the hiding bits
        changes no gitlink)."""
        if self._marks is None:
            index = os.path.join(self.shadow, "index")
            self._marks = index_marks(index, 32 if len(self.head or "") == 64 else 20)
        return self._marks

    def gitlinks(self):
        """The paths (decoded with surrogateescape) of the private index's gitlinks: nested
        repositories whose files and commits are in no checkpoint part. A scan of the index
        file finds none in the usual case, without running git."""
        if not self.index_marks()[1]:
            return []
        out = self.run("ls-files", "-s", "-z").stdout
        return [e.partition(b"\t")[2].decode("utf-8", "surrogateescape")
                for e in out.split(b"\0") if e.startswith(b"160000 ")]  # fmt: skip

    def reveal_hidden(self):
        """Clear, in the private index, the bits that make git look away from a tracked file's
        changes (``update-index --assume-unchanged``, ``--skip-worktree``): the agent's edits to
        such a file would be in no patch. Returns the paths cleared. A scan of the index file
        finds none in the usual case, without running git."""
        if not self.index_marks()[0]:
            return []
        code, out, err = self.capture("ls-files", "-v", "-z")
        if code != 0:
            raise GitError("ls-files", err.decode(errors="replace").strip() or "failed")
        entries = [e for e in out.split(b"\0") if len(e) > 2]
        valid = [e[2:] for e in entries if e[:1].islower()]
        skipped = [e[2:] for e in entries if e[:1] in (b"S", b"s")]
        # One flag per run: update-index --stdin applies only one of the two.
        for flag, paths in (("--no-assume-unchanged", valid), ("--no-skip-worktree", skipped)):
            if paths:
                self.run("update-index", flag, "-z", "--stdin",
                         stdin=b"".join(p + b"\0" for p in paths))  # fmt: skip
        return sorted({p.decode("utf-8", "surrogateescape") for p in valid + skipped})

    def pin_head(self, sha):
        """Point the private HEAD at ``sha``, detached (the repo's own HEAD is not touched)."""
        with open(os.path.join(self.shadow, "HEAD"), "w") as f:
            f.write("%s\n" % sha)
        self.head_ref, self.head = None, sha

    def env(self, extra=None, gitdir=None):
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env.update(
            GIT_DIR=gitdir or self.shadow,
            GIT_CONFIG_NOSYSTEM="1",
            GIT_CONFIG_GLOBAL=os.path.join(self.scratch, "gitconfig"),
            GIT_ATTR_NOSYSTEM="1",
            GIT_TERMINAL_PROMPT="0",
            GIT_NO_REPLACE_OBJECTS="1",
            HOME=self.scratch,
            XDG_CONFIG_HOME=self.scratch,
        )
        if gitdir is None:
            env.update(GIT_WORK_TREE=self.worktree,
                       GIT_OBJECT_DIRECTORY=os.path.join(self.gitdir, "objects"))  # fmt: skip
        env.update(extra or {})
        return env

    def capture(self, *args, env=None):
        """(exit status, stdout, stderr) of git run in the private folder, without the
        ``subprocess`` module: the quick path of an unchanged checkpoint."""
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            actions = [(os.POSIX_SPAWN_DUP2, null, 0), (os.POSIX_SPAWN_DUP2, out_w, 1),
                       (os.POSIX_SPAWN_DUP2, err_w, 2)]  # fmt: skip
            previous = os.getcwd()
            os.chdir(self.worktree)
            try:
                pid = os.posix_spawnp("git", ["git", *COMMAND_LINE, *args], self.env(env),
                                      file_actions=actions)  # fmt: skip
            finally:
                os.chdir(previous)
        finally:
            for fd in (null, out_w, err_w):
                os.close(fd)
        reading = {out_r: [], err_r: []}
        read = {}
        try:
            while reading:
                ready, _, _ = select.select(list(reading), [], [])
                for fd in ready:
                    data = os.read(fd, 1 << 16)
                    if data:
                        reading[fd].append(data)
                    else:
                        read[fd] = reading.pop(fd)
        finally:
            os.close(out_r)
            os.close(err_r)
        _, status = os.waitpid(pid, 0)
        out, err = b"".join(read.get(out_r, [])), b"".join(read.get(err_r, []))
        return os.waitstatus_to_exitcode(status), out, err

    def run(self, *args, check=True, stdin=None, stdout=PIPE, env=None, cwd=None):
        """Run git in the private folder over the repo's objects and working tree."""
        import subprocess

        proc = subprocess.run(
            ["git", *COMMAND_LINE, *args], input=stdin, stdout=stdout, stderr=subprocess.PIPE,
            env=self.env(env), cwd=cwd or self.worktree,
        )  # fmt: skip
        if check and proc.returncode != 0:
            err = proc.stderr or (proc.stdout if stdout == PIPE else b"")
            raise GitError(args[0], err.decode(errors="replace").strip() or "failed")
        return proc

    def out(self, *args):
        return self.run(*args).stdout.decode().strip()

    def popen(self, *args, env=None, **kw):
        import subprocess

        return subprocess.Popen(["git", *COMMAND_LINE, *args], env=self.env(env),
                                cwd=self.worktree, **kw)  # fmt: skip

    def checkout_index(self, commit, index_file, rounds=200, less=frozenset()):
        """Write to ``index_file`` (a new file) the index a checkout of ``commit`` would make,
        less every path git refuses to check out; returns those paths (sorted, decoded with
        surrogateescape). Git is the judge: each path it still names as invalid is left out
        too, for at most ``rounds`` rounds. The paths in the set ``less`` are left out too
        (and not returned). Raises GitError when the tree cannot be read or git fails for
        another reason."""
        env = {"GIT_INDEX_FILE": index_file}
        if not less and self.run("read-tree", commit, env=env, check=False).returncode == 0:
            return []
        listing = self.run("ls-tree", "-r", "-z", "--full-tree", commit).stdout
        entries = []
        refused = set()
        for entry in listing.split(b"\0"):
            if not entry:
                continue
            meta, _, raw = entry.partition(b"\t")
            path = raw.decode("utf-8", "surrogateescape")
            if path in less:
                continue
            entries.append((entry, path))
            if checkout_refuses(path, meta.startswith(b"120000")):
                refused.add(path)
        for _ in range(rounds):
            try:
                os.unlink(index_file)
            except FileNotFoundError:
                pass
            data = b"".join(e + b"\0" for e, path in entries if path not in refused)
            proc = self.run("update-index", "-z", "--index-info", stdin=data, env=env,
                            check=False)  # fmt: skip
            if proc.returncode == 0:
                return sorted(refused)
            err = proc.stderr
            start = err.find(b"nvalid path '")
            end = err.find(b"'\n", start + 13)
            named = err[start + 13:end].decode("utf-8", "surrogateescape") if start >= 0 else None
            if named is None or end < 0 or named in refused:
                raise GitError("update-index", err.decode(errors="replace").strip() or "failed")
            refused.add(named)
        raise GitError("update-index", "more than %d paths of %s are refused" % (rounds, commit))

    # -- writing the repo's own refs, HEAD and index (restore) -------------------------------

    def _repo_git(self, *args):
        import subprocess

        proc = subprocess.run(["git", *COMMAND_LINE, *args], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=self.env(gitdir=self.gitdir),
                              cwd=self.scratch)  # fmt: skip
        if proc.returncode != 0:
            raise GitError(args[0], proc.stderr.decode(errors="replace").strip() or "failed")

    def update_repo_ref(self, ref, sha):
        """Point the repo's ``ref`` at ``sha`` (update-ref runs no program but hooks)."""
        self._repo_git("update-ref", "--no-deref", ref, sha)

    def set_repo_head(self, ref_or_sha):
        """The repo's HEAD: on branch ref ``refs/heads/...``, or detached at a commit."""
        if ref_or_sha.startswith("refs/"):
            self._repo_git("symbolic-ref", "HEAD", ref_or_sha)
        else:
            self._repo_git("update-ref", "--no-deref", "HEAD", ref_or_sha)

    def write_back_index(self):
        """Replace the repo's index with the private one (renamed into place)."""
        tmp = os.path.join(self.gitdir, "index.hangar-%s" % os.urandom(6).hex())
        copy_regular(os.path.join(self.shadow, "index"), tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, os.path.join(self.gitdir, "index"))
