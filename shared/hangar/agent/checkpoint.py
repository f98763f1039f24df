"""Pack a checkpoint inside a sandbox. Standard library only; run as ``python3 -I -c SRC CONFIG``.

CONFIG is one JSON object::

    repo                the repo's folder (/workspace/<repo>)
    home                HOME, which the conversation folders are relative to
    conversation_dirs   folders under HOME to archive, if they exist (never credentials)
    exchange_dir        the session's exchange folder under HOME ($HANGAR_IO), archived as a
                        part of its own (exchange.tar.*), or null
    base                the commit the session builds on, or null (then: merge-base with the
                        upstream branch, if any)
    harness, harness_session
    max_part, max_untracked, max_patch      byte caps (above max_untracked, the largest
                        untracked files are left out one by one until the rest fits)
    max_restore         the most a restore may write, uncompressed (absent: no cap)
    skip_if_fingerprint the previous checkpoint's fingerprint, or null
    format              1 (absent: parts whole, archives as compressed tars) or 2 (content-
                        addressed chunks, :mod:`hangar.agent.chunking`; standard input then
                        holds the cids the control plane has, 32 bytes each)
    tmp                 hangar's own scratch folder (its lock and staging), out of the
                        agent's reach; absent: the system's temporary folder

git runs through :mod:`hangar.agent.gitsafe`: nothing the repo's or the agent's config names
is ever run, and the repo's own git folder is only read. What goes into the archives obeys
:mod:`hangar.agent.paths`, the rules the restore applies: anything it would refuse (a link into
.git, a FIFO, a link out of a conversation folder) is left out and named in a warning, so every
checkpoint restores. Each fact a restore's git steps depend on is checked here too, and where
the agent made it unrestorable, what stands in for it is recorded with a warning: a branch name
git refuses (a detached head), a HEAD naming no commit (the base), paths a checkout refuses in
the head's tree (left out of every patch). The manifest's ``checked`` says the checks passed;
it is false when a restore would write more than ``max_restore`` bytes. Nothing the agent
leaves can fail the whole checkpoint: a tracked file
replaced by a FIFO, grown huge or unreadable loses its uncommitted changes alone, named.

Standard output is one JSON line (the manifest) followed by the bytes of each part listed in it,
in order, each exactly ``size`` bytes. In format 2 each part is listed with its chunks (a blob:
the cids that joined give its bytes; a tree: its entries, each file with its cids) and the
manifest's ``new`` lists, as [cid, size], the chunks the control plane lacks; their bytes
follow the manifest, in that order. A file whose stat did not move since the last checkpoint
in this sandbox is not read again (the stat cache in hangar's private folder), unless the
control plane lacks one of its chunks. With an unchanged fingerprint, the manifest says
``"unchanged": true`` and lists no parts. On failure the exit status is non-zero and stderr says
why. The manifest's ``change`` counts the session patch (files, lines added and removed) when
one was made. Nothing is left behind in the repo: HEAD is pinned to ``refs/hangar/checkpoint`` in
hangar's private git folder, not the repo's.
"""

import json
import os
import sys
from stat import S_ISLNK, S_ISREG, S_IXUSR

try:
    from _sha256 import sha256  # built in: hashlib would load OpenSSL, a few ms on the quick path
except ImportError:
    from hashlib import sha256

from hangar.agent.chunking import ChunkSink, StatCache, chunk_file, entry_fields, listing
from hangar.agent.chunking import patch_file_chunks, read_known, replace_file
from hangar.agent.gitsafe import GitError, Repo, branch_problem, checkout_refuses, remove_tree
from hangar.agent.paths import entry_problem, folders_rule, kind_problem, left_out_warning
from hangar.agent.paths import private_folder, readable
from hangar.agent.paths import untracked_rule

# shutil, subprocess and threading are imported when parts are packed: the unchanged-fingerprint
# path (every interval tick) must stay as quick as the interpreter's start.

PIN = "refs/hangar/checkpoint"
DIFF = ["diff", "--binary", "--no-ext-diff", "--no-textconv", "--no-color"]
STAGING_PREFIX = ".hangar-ckpt-"
SEALING_UNAVAILABLE = 5
"""The exit status when this sandbox cannot seal a direct checkpoint (hangar.agent's)."""
# Fields in a `git status --porcelain=v2` record (the path is the last, and may hold spaces).
STATUS_FIELDS = {b"1": 9, b"u": 11, b"?": 2}
STALE_SECONDS = 3600
SPLIT_AT = 1000  # index entries a diff's tree lacks, past which the diff is split (diff_runs)
# Paths to leave out of a diff past which they are taken out of its tree and index instead of
# named one pathspec each: a command line holds about 2 MB, and git matches every path against
# every pathspec (a tree the agent builds by hand can hold 100,000 paths a checkout refuses).
MAX_PATHSPECS = 1000
EMPTY_BLOB = {40: "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391",  # by the length of an object id
              64: "473a0f4c3be8a93681a267e3b1e9a7dcda1185436fe141f7749120a303721813"}  # fmt: skip
# The manifest is one line the control plane reads up to 1 MiB, and its warnings are stored on
# the checkpoint's record: however many entries the agent leaves, they stay within these.
MAX_WARNINGS = 40
MAX_WARNING_CHARS = 2000
DROPPED_NAMED = 20


class Failure(Exception):
    pass


def stat_line(path):
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):  # a tracked folder may be a file now
        return "-"
    return "%d:%d:%d:%d:%o" % (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_mode)


def conversation_listing(home, dirs):
    """(relative path, stat) of every file under the conversation folders that exist."""
    entries = []
    for rel in dirs:
        top = os.path.join(home, rel)
        if not os.path.isdir(top):
            continue
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames.sort()
            for name in sorted(filenames):
                full = os.path.join(dirpath, name)
                entries.append((os.path.relpath(full, home), stat_line(full)))
    return entries


def repo_state(r, base=None):
    """(head, branch or None, status records, warnings) from one ``git status`` call, which
    takes no optional locks so that it never races the agent's own git commands.

    A HEAD that names no commit (an unborn branch, a stray object name, garbage) would fail
    every checkpoint and every restore: the session's ``base`` stands in for it, detached, with
    a warning, and the working tree is saved against it."""
    code, out, err = 1, b"", b"the repo has no commit at HEAD"
    if r.head:
        code, out, err = status(r)
    if code != 0:
        if not base or (r.head and r.capture("cat-file", "-e", r.head + "^{commit}")[0] == 0):
            if not r.head:
                raise Failure("the repo has no commit at HEAD")
            why = err.decode(errors="replace").strip() or "failed"
            return state_on_fresh_index(r, why) or throw(GitError("status", why))
        named = r.head_ref or r.head or "nothing"
        r.pin_head(base)
        code, out, err = status(r)
        if code != 0:
            raise GitError("status", err.decode(errors="replace").strip() or "failed")
        warning = ("HEAD names no commit (it points at %s): the checkpoint records the "
                   "session's base commit %s, detached, with the working tree's changes on it"
                   % (readable(named)[:200], base))  # fmt: skip
        return base, None, split_records(out), [warning]
    return r.head, r.branch, split_records(out), []


def state_on_fresh_index(r, why):
    """:func:`repo_state` on an index read from HEAD, for an index git cannot read (garbage, a
    split index whose shared index is gone, an extension git does not know): the work in the
    tree is saved, what was staged as unstaged changes, with a warning. None when git fails on
    that index too."""
    try:
        r.fresh_index()
    except (GitError, OSError):
        return None
    code, out, _ = status(r)
    if code != 0:
        return None
    warning = ("the repo's index could not be read (git status: %s): the checkpoint reads a fresh "
               "one from HEAD, so what was staged is saved as unstaged changes"
               % why.replace(r.shadow, ".git")[:300])  # fmt: skip
    return r.head, r.branch, split_records(out), [warning]


def throw(exc):
    raise exc


def status(r):
    return r.capture(
        "status", "--porcelain=v2", "-z", "--untracked-files=all", "--ignored=traditional",
        "--ignore-submodules", "--no-renames", env={"GIT_OPTIONAL_LOCKS": "0"},
    )  # fmt: skip


def split_records(out):
    return [record for record in out.split(b"\0") if record]


def restorable_branch(branch, warnings):
    """``branch``, or None (a detached head) when git would refuse to create it at restore."""
    why = branch and branch_problem(branch)
    if why:
        warnings.append("HEAD is on a branch whose name %s (%s): the checkpoint records a "
                        "detached head, and a restore leaves HEAD detached at the same commit"
                        % (why, readable(branch)[:200]))  # fmt: skip
        return None
    return branch


def head_tree_size(r):
    """The bytes a checkout of the pinned head writes (its blobs' sizes)."""
    total = 0
    for entry in r.run("ls-tree", "-r", "-l", "-z", "--full-tree", PIN).stdout.split(b"\0"):
        fields = entry.split(None, 4)
        if len(fields) == 5 and fields[3].isdigit():
            total += int(fields[3])
    return total


def refused_in_tree(r, staging, warnings, known=None):
    """The paths of the pinned head's tree that a checkout refuses (a tree the agent built by
    hand can hold ``.GIT/hooks/x``): left out of the patches, and of the working tree a
    restore writes, each named. The commits themselves are bundled whole. ``known``: the
    paths already found for this head (:class:`TreeFacts`)."""
    refused = known if known is not None else r.checkout_index(PIN, os.path.join(staging,
                                                                                "check-index"))
    if refused:
        warnings.append(left_out_warning(
            "paths of the head commit that git refuses to check out",
            [(path, "is refused by git's checkout") for path in refused]))  # fmt: skip
    return refused


class TreeFacts:
    """What a checkpoint learns of a head commit's tree (the paths a checkout refuses, the
    bytes a checkout writes), kept in hangar's own scratch folder for the next checkpoint: a
    commit names its tree, so facts about a head never go stale, and most turns leave the head
    where it was. Kept only in a folder of hangar's (``cfg["tmp"]``, 0700, out of the agent's
    reach): facts the agent could write would decide what a restore refuses."""

    NAME = "tree-facts.json"

    def __init__(self, folder, head):
        self.path = os.path.join(folder, self.NAME) if folder else None
        self.head = head
        self.refused = self.size = None
        if self.path:
            try:
                with open(self.path, "rb") as f:
                    facts = json.loads(f.read(1 << 22))
                if facts.get("head") == head:
                    self.refused, self.size = list(facts["refused"]), int(facts["size"])
            except (OSError, ValueError, KeyError, TypeError):
                pass  # none yet, or unreadable: found again below

    def keep(self, refused, size):
        if not self.path or (self.refused, self.size) == (refused, size):
            return
        # Two checkpoints writing at once may spoil it: then it is unreadable, and found again.
        replace_file(self.path, json.dumps({"head": self.head, "refused": refused,
                                            "size": size}).encode())  # fmt: skip


def fingerprint(repo, home, dirs, head, branch, records):
    """A hash that changes when anything a checkpoint would store changes.

    File stats include ctime and inode: an edit that restores a file's size and mtime still
    moves its ctime, which no unprivileged process can set.
    """
    h = sha256()
    h.update(("%s\n%s\n" % (head, branch)).encode())
    h.update(stat_line(os.path.join(repo, ".git", "index")).encode())
    for record in records:
        if record[:1] == b"!":
            continue  # ignored paths are never checkpointed
        h.update(record + b"\0")
        fields = STATUS_FIELDS.get(record[:1])
        if fields is None:
            continue
        path = record.split(b" ", fields - 1)[-1]
        full = os.path.join(repo, path.decode("utf-8", "surrogateescape"))
        h.update(b"\0" + stat_line(full).encode())
    for rel, st in conversation_listing(home, dirs):
        h.update(("\0%s\0%s" % (rel, st)).encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def upstream_base(r, head):
    """Where HEAD left the remote's default branch, read from the repo's own refs."""
    names = ["refs/remotes/origin/HEAD"]
    if r.branch:
        names.insert(0, "refs/remotes/origin/" + r.branch)
    for ref in names:
        tip = r.resolve(ref)
        if tip:
            mb = r.run("merge-base", head, tip, check=False)
            if mb.returncode == 0:
                return mb.stdout.decode().strip()
    return None


def compressor():
    return "zstd" if shutil.which("zstd") else "gzip"


def archive(cwd, members, out_path, compression):
    """tar the NUL-separated ``members`` (relative to ``cwd``) into ``out_path``, compressed."""
    tar = subprocess.Popen(
        ["tar", "-c", "-f", "-", "--null", "--no-recursion", "--hard-dereference",
         "--ignore-failed-read", "--warning=no-file-ignored", "--warning=no-file-changed",
         "--warning=no-failed-read", "-T", "-"],
        cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    feeder = threading.Thread(target=_feed, args=(tar.stdin, members))
    feeder.start()
    with open(out_path, "wb") as out:
        if compression == "zstd":
            z = subprocess.run(["zstd", "-q", "-1", "-T0", "-c"], stdin=tar.stdout, stdout=out,
                               stderr=subprocess.PIPE)  # fmt: skip
            zerr = z.returncode
        else:
            import gzip

            with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=1, mtime=0) as gz:
                shutil.copyfileobj(tar.stdout, gz, 1 << 20)
            zerr = 0
    tar.stdout.close()
    feeder.join()
    err = tar.stderr.read()
    # GNU tar exits 1 when a file changed while it was read: the archive is still usable.
    if tar.wait() not in (0, 1) or zerr:
        raise Failure("tar: %s" % err.decode(errors="replace").strip())


def _feed(pipe, members):
    try:
        pipe.write(b"".join(m.encode("utf-8", "surrogateescape") + b"\0" for m in members))
    except BrokenPipeError:
        pass
    finally:
        try:
            pipe.close()
        except BrokenPipeError:
            pass


def untracked_entries(records):
    """The untracked paths git listed (a trailing / is a nested repository, left whole)."""
    return [rec[2:].decode("utf-8", "surrogateescape") for rec in records if rec[:2] == b"? "]


def ignored_entries(records):
    return {rec[2:].decode("utf-8", "surrogateescape") for rec in records if rec[:2] == b"! "}


def changed_tracked(records):
    """The tracked paths whose working-tree state differs from the index or HEAD."""
    out = []
    for rec in records:
        fields = STATUS_FIELDS.get(rec[:1])
        if fields is not None and rec[:1] != b"?":
            out.append(rec.split(b" ", fields - 1)[-1].decode("utf-8", "surrogateescape"))
    return out


def select_untracked(repo, listed, cap, warnings):
    """The untracked files that go into the checkpoint. What a restore would refuse is left out
    by name; above ``cap`` bytes the largest files are left out one by one until the rest fits,
    each named, so a build log never costs the sources beside it."""
    refused, kept = [], []
    for path in listed:
        if path.endswith("/"):
            continue
        why = entry_problem(repo, path, untracked_rule)
        if why == "gone":
            continue
        if why:
            refused.append((path, why))
        else:
            kept.append(path)
    if refused:
        warnings.append(left_out_warning("untracked entries", refused))
    sizes = {}
    for path in kept:
        try:
            st = os.lstat(os.path.join(repo, path))
            sizes[path] = st.st_size if S_ISREG(st.st_mode) else 0
        except (FileNotFoundError, NotADirectoryError):
            sizes[path] = 0
    total = sum(sizes.values())
    if total <= cap:
        return kept
    dropped = set()
    for path in sorted(kept, key=lambda p: (-sizes[p], p)):
        if total <= cap:
            break
        dropped.add(path)
        total -= sizes[path]
        if len(dropped) <= DROPPED_NAMED:
            warnings.append("untracked file %s left out: %d bytes, and the untracked files may "
                            "take %d bytes in all" % (path, sizes[path], cap))  # fmt: skip
    if len(dropped) > DROPPED_NAMED:
        warnings.append("%d more untracked files left out, smaller ones, for the same reason"
                        % (len(dropped) - DROPPED_NAMED))  # fmt: skip
    return [p for p in kept if p not in dropped]


def tracked_left_out(repo, changed, cap, warnings):
    """Changed tracked paths whose working-tree side cannot be diffed: a FIFO, socket or device
    in a file's place, a file over ``cap`` bytes (a huge sparse one, say) or one not even
    hangar can open. Their uncommitted changes are left out, each named; the rest are saved."""
    out = []
    for path in changed:
        full = os.path.join(repo, path)
        try:
            st = os.lstat(full)
        except (FileNotFoundError, NotADirectoryError):
            continue  # deleted (or its folder is a file now): the diff says so
        why = kind_problem(st.st_mode)
        if why is None and S_ISREG(st.st_mode):
            if st.st_size > cap:
                why = "is %d bytes, over the %d-byte part cap" % (st.st_size, cap)
            else:
                try:
                    os.close(os.open(full, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW))
                except OSError as exc:
                    why = "cannot be read (%s)" % exc.strerror
        if why:
            out.append(path)
            warnings.append("uncommitted changes to %s left out: it %s" % (path, why))
    return out


def find_special(repo, ignored, tracked_special, warnings):
    """Name every FIFO, socket and device in the working tree outside .git and ignored paths
    (git lists none of them as untracked); they are left out of every part."""
    found = []
    todo = [""]
    while todo:
        rel = todo.pop()
        try:
            entries = list(os.scandir(os.path.join(repo, rel) if rel else repo))
        except OSError:
            continue
        for entry in entries:
            path = rel + "/" + entry.name if rel else entry.name
            if entry.name == ".git" or path in ignored or path + "/" in ignored:
                continue
            try:
                if entry.is_dir(follow_symlinks=False):
                    todo.append(path)
                elif not (entry.is_file(follow_symlinks=False) or entry.is_symlink()):
                    if path not in tracked_special:
                        found.append((path, kind_problem(entry.stat(follow_symlinks=False).st_mode)))
            except OSError:
                continue
    if found:
        warnings.append(left_out_warning("special files", sorted(found)))


def folder_members(home, dirs, what, warnings, max_file=None, sizes=None):
    """Every folder, file and link under ``dirs`` (relative to HOME) that may go into their
    archive; the rest left out by name, and so is a file over ``max_file`` bytes (the restore
    cap: a few kilobytes of compressed zeros would be more than a restore may write). The sizes
    of the files kept are added to ``sizes``."""
    rule = folders_rule(dirs, what)
    out, refused = [], []
    for rel in dirs:
        top = os.path.join(home, rel)
        if os.path.islink(top):
            warnings.append("%s ~/%s left out: it is a symbolic link" % (what, rel))
            continue
        for dirpath, dirnames, filenames in os.walk(top):
            rel_dir = os.path.relpath(dirpath, home)
            out.append(rel_dir)
            for name in dirnames + filenames:
                member = os.path.join(rel_dir, name)
                if name in dirnames and not os.path.islink(os.path.join(home, member)):
                    continue  # walked into next
                why = entry_problem(home, member, rule)
                if why is None and name in filenames:
                    try:
                        size = os.lstat(os.path.join(home, member)).st_size
                    except FileNotFoundError:
                        continue
                    if max_file is not None and size > max_file:
                        why = "is %d bytes, over the %d-byte restore cap" % (size, max_file)
                    elif sizes is not None:
                        sizes.append(size)
                if why is None:
                    out.append(member)
                elif why != "gone":
                    refused.append((member, why))
    if refused:
        warnings.append(left_out_warning(what, refused))
    return out


def make_bundle(r, staging, head, base):
    """The commits since ``base``, the commit the session started from, which any fresh clone
    has. (``--not --remotes`` would also leave out commits that only a stale or foreign
    remote-tracking ref holds, which a fresh clone lacks.) Without a base: the commits no
    remote-tracking ref has."""
    path = os.path.join(staging, "repo.bundle")
    if base:
        if base == head:
            return None
        exclude = ["--not", base]
    else:
        exclude = ["--not", "--remotes"]
    count = int(r.out("rev-list", "--count", PIN, *exclude))
    if count == 0:
        return None
    r.run("bundle", "create", "-q", path, PIN, *exclude)
    return path


def excluding(paths):
    """Pathspecs for the whole tree but ``paths``."""
    if not paths:
        return []
    return ["--", "."] + [":(exclude,literal)" + p for p in paths]


def narrowed(r, staging, tag, tree, exclude):
    """How a diff from ``tree`` leaves the paths ``exclude`` out: ``(tree, env, pathspecs,
    index_narrowed)``. Up to MAX_PATHSPECS paths, by a pathspec each. Past that, by a tree and
    a copy of the private index that lack them, with no pathspec: ``env`` names the object
    stores that hold the tree and the copy (``GIT_INDEX_FILE``). ``index_narrowed`` is False,
    and ``env`` names no index, when the index holds paths git will not take out of it (only an
    index written by hand holds paths git refuses): then the caller diffs on an index read
    from the tree."""
    if len(exclude) <= MAX_PATHSPECS:
        return tree, {}, excluding(exclude), True
    less = frozenset(exclude)
    # The narrowed tree is written to objects of the checkpoint's own, never into the repo's.
    objects = os.path.join(staging, tag + "-objects")
    os.mkdir(objects)
    stores = {"GIT_OBJECT_DIRECTORY": objects,
              "GIT_ALTERNATE_OBJECT_DIRECTORIES": os.path.join(r.gitdir, "objects")}  # fmt: skip
    tree_index = os.path.join(staging, tag + "-narrow-tree")
    r.checkout_index(tree, tree_index, less=less)
    narrow = r.run("write-tree", env=dict(stores, GIT_INDEX_FILE=tree_index)).stdout
    narrow = narrow.decode().strip()
    index = os.path.join(staging, tag + "-narrow-index")
    shutil.copyfile(os.path.join(r.shadow, "index"), index)
    env = dict(stores, GIT_INDEX_FILE=index)
    r.run("update-index", "--force-remove", "-z", "--stdin", env=env,
          stdin=b"".join(p.encode("utf-8", "surrogateescape") + b"\0" for p in exclude))  # fmt: skip
    held = r.run("ls-files", "-z", env=env).stdout.split(b"\0")
    if any(p.decode("utf-8", "surrogateescape") in less for p in held if p):
        return narrow, stores, [], False
    return narrow, env, [], True


def make_diff(r, staging, name, *args, exclude=()):
    """``git diff ARGS PIN`` into the file ``name``, less ``exclude``; None when ``exclude``
    cannot be left out of the index (:func:`narrowed`)."""
    path = os.path.join(staging, name)
    tree, env, specs, index_narrowed = narrowed(r, staging, name, PIN, exclude)
    if not index_narrowed:
        return None
    with open(path, "wb") as out:
        r.run(*DIFF, "--no-renames", *args, tree, *specs, stdout=out, env=env or None)
    return path


def make_wip(r, staging, exclude, added=()):
    """wip.patch: the pinned head to the working tree, staged and unstaged changes alike;
    ``added``: the new files the index holds (:func:`staged_new`)."""
    hash_len = 64 if r.head and len(r.head) == 64 else 40
    runs = diff_runs(r, staging, "wip", PIN, hash_len, exclude, added, extra=["--no-renames"])
    path = os.path.join(staging, "wip.patch")
    why = write_runs(r, path, runs)
    if why:
        raise GitError("diff", why)
    return path


def make_staged(r, staging, exclude=()):
    """staged.patch: the pinned head to the index, so restore can rebuild what was staged."""
    path = make_diff(r, staging, "staged.patch", "--cached", exclude=exclude)
    return path if path and os.path.getsize(path) else None


def new_files_index(path, worktree, paths, hash_len):
    """Write at ``path`` an index that holds each of ``paths`` (untracked files and links; those
    gone meanwhile are skipped) as ``git add -N`` would, intent-to-add, and nothing else, so
    that ``git diff`` (the index against the working tree) shows each one as a new file. Returns
    how many it holds. Written here, in one pass, because git's own ways are quadratic in the
    paths: ``git add -N`` matches every path against every pathspec, and a diff of a tree
    against the working tree rescans the index for each entry the tree lacks (at 200,000 files,
    minutes either way)."""
    import hashlib

    entries = []
    for rel in paths:
        try:
            mode = os.lstat(os.path.join(worktree, rel)).st_mode
        except (FileNotFoundError, NotADirectoryError):
            continue
        if S_ISLNK(mode):
            kind = 0o120000
        elif S_ISREG(mode):
            kind = 0o100755 if mode & S_IXUSR else 0o100644
        else:
            continue
        entries.append((rel.encode("utf-8", "surrogateescape"), kind))
    entries.sort()  # git's order: by the bytes of the path
    empty = bytes.fromhex(EMPTY_BLOB[hash_len])
    h = hashlib.sha1() if hash_len == 40 else hashlib.sha256()
    with open(path, "wb") as out:

        def put(data):
            h.update(data)
            out.write(data)

        put(b"DIRC" + (3).to_bytes(4, "big") + len(entries).to_bytes(4, "big"))
        fixed = 40 + len(empty) + 4  # stat data, mode, uid, gid, size; id; flags; ita flag
        for name, kind in entries:
            flags = 0x4000 | min(len(name), 0xFFF)  # extended flags follow; the name's length
            size = (fixed + len(name) + 8) & ~7  # NUL-padded to a multiple of 8
            put(bytes(24) + kind.to_bytes(4, "big") + bytes(12) + empty + flags.to_bytes(2, "big")
                + (0x2000).to_bytes(2, "big") + name + bytes(size - fixed - len(name)))
        out.write(h.digest())
    return len(entries)


def staged_new(records):
    """The paths the index adds to HEAD (new files ``git add``-ed), from status records."""
    return [rec.split(b" ", 8)[-1].decode("utf-8", "surrogateescape") for rec in records
            if rec[:3] == b"1 A"]  # fmt: skip


def index_lacks(r, tree, what, env=None):
    """The paths the private index adds to ``tree`` (``what`` "A") or lost from it ("D")."""
    code, out, err = r.capture("diff", "--cached", "--name-only", "--no-renames", "-z",
                               "--diff-filter=" + what, tree,
                               env=dict(env or {}, GIT_OPTIONAL_LOCKS="0"))  # fmt: skip
    if code != 0:
        raise GitError("diff", err.decode(errors="replace").strip() or "failed")
    return [p.decode("utf-8", "surrogateescape") for p in out.split(b"\0") if p]


def diff_runs(r, staging, tag, tree, hash_len, exclude=(), added=(), untracked=(), extra=()):
    """The ``git diff`` runs whose outputs, one after another, make one patch (``git apply``
    takes it whole) from ``tree`` to the working tree, ``untracked`` (paths the index lacks)
    included as new files through :func:`new_files_index`; ``exclude`` left out. ``added``
    are the paths the index holds and ``tree`` lacks: ``git diff TREE`` rescans the index for
    each of them (200,000 staged new files: minutes), so past SPLIT_AT of them the files of
    ``tree`` are diffed on an index read from ``tree`` alone (without the index's stat data,
    so each is read) and the added ones as new files."""
    tree, narrow, specs, index_narrowed = narrowed(r, staging, tag, tree, exclude)
    env = dict(narrow, GIT_OPTIONAL_LOCKS="0")
    runs = [([*DIFF, *extra, tree, *specs], env)]
    new = list(untracked)
    if len(added) > SPLIT_AT or not index_narrowed:
        index = os.path.join(staging, tag + "-tree-index")
        stores = {k: v for k, v in env.items() if k != "GIT_INDEX_FILE"}
        read = r.run("read-tree", tree, env=dict(stores, GIT_INDEX_FILE=index), check=False)
        if read.returncode == 0:
            lost = set(index_lacks(r, tree, "D", stores)) if new else set()  # from the tree
            skip = set(exclude)
            new = [p for p in new if p not in lost] + [p for p in added if p not in skip]
            runs = [([*DIFF, *extra, tree, *specs], dict(stores, GIT_INDEX_FILE=index))]
    index = os.path.join(staging, tag + "-new-index")
    if new and new_files_index(index, r.worktree, new, hash_len):
        runs.append(([*DIFF, *extra], dict(env, GIT_INDEX_FILE=index)))
    return runs


def write_runs(r, path, runs, limit=None):
    """Write the outputs of ``runs`` (from :func:`diff_runs`) to ``path``; returns None, or why
    it stopped: past ``limit`` bytes, or what a failing git said."""
    written = 0
    with open(path, "wb") as out:
        for args, env in runs:
            proc = r.popen(*args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
            while True:
                chunk = proc.stdout.read(1 << 20)
                if not chunk:
                    break
                written += len(chunk)
                if limit is not None and written > limit:
                    proc.kill()
                    proc.wait()
                    return "larger than %d bytes" % limit
                out.write(chunk)
            err = proc.stderr.read()
            if proc.wait() != 0:
                return "git diff: %s" % err.decode(errors="replace").strip()
    return None


def make_session_patch(r, staging, base, untracked, limit, exclude=()):
    """base..working tree, untracked files included (:func:`diff_runs`). Returns (path, None)
    or (None, warning)."""
    added = index_lacks(r, base, "A")
    runs = diff_runs(r, staging, "session", base, len(base), exclude, added, untracked)
    path = os.path.join(staging, "session.patch")
    why = write_runs(r, path, runs, limit)
    return (None, "session.patch skipped: " + why) if why else (path, None)


def patch_stat(path):
    """The size of the change the patch at ``path`` (git's unified diff) makes: files touched
    (one ``diff --git`` each), lines added and removed, counted by each hunk's header (so a
    line whose text starts with ``+++`` or ``---`` counts as what it is; a binary patch's
    data counts no line)."""
    files = added = removed = 0
    old = new = 0  # the lines left in the current hunk, by its header
    with open(path, "rb") as patch:
        for line in patch:
            if old > 0 or new > 0:
                mark = line[:1]
                if mark == b"+":
                    added, new = added + 1, new - 1
                    continue
                if mark == b"-":
                    removed, old = removed + 1, old - 1
                    continue
                if mark == b" ":
                    old, new = old - 1, new - 1
                    continue
                if mark == b"\\":  # no newline at the end of the line before
                    continue
                old = new = 0  # not a hunk line: the hunk's header said too much
            if line.startswith(b"diff --git "):
                files += 1
            elif line.startswith(b"@@ -"):
                old, new = hunk_counts(line)
    return {"files": files, "added": added, "removed": removed}


def hunk_counts(header):
    """The old and new line counts of a hunk header ``@@ -A[,B] +C[,D] @@`` (0, 0 if it is not
    one)."""
    fields = header.split(b" ", 3)
    if len(fields) < 4 or not fields[1].startswith(b"-") or not fields[2].startswith(b"+"):
        return 0, 0
    counts = []
    for field in fields[1:3]:
        _, comma, count = field[1:].partition(b",")
        counts.append(int(count) if comma and count.isdigit() else 0 if comma else 1)
    return counts[0], counts[1]


def clean_stale(tmp, keep):
    """Remove staging folders of checkpoints that died (older than STALE_SECONDS)."""
    import time

    now = time.time()
    for name in os.listdir(tmp):
        if name.startswith(STAGING_PREFIX) and os.path.join(tmp, name) != keep:
            full = os.path.join(tmp, name)
            try:
                if now - os.lstat(full).st_mtime > STALE_SECONDS:
                    shutil.rmtree(full, ignore_errors=True)
            except OSError:
                pass


def run_all(jobs):
    """Run callables in threads; re-raise the first failure."""
    results, errors = {}, []

    def wrap(name, fn):
        try:
            results[name] = fn()
        except Exception as exc:  # reported to the caller below
            errors.append(exc)

    threads = [threading.Thread(target=wrap, args=item) for item in jobs.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def pack(cfg, r, staging, head, branch, records, fp, head_warnings=(), own_tmp=False,
         known=None):
    """The manifest and the parts of a checkpoint. ``known``: the cids the control plane holds
    (format 2); None for format 1."""
    repo, home = cfg["repo"], cfg["home"]
    chunked = known is not None
    if chunked:
        sink = ChunkSink(os.path.join(staging, "chunks"), known)
        cache = StatCache(cfg.get("tmp") if own_tmp else None)
    dirs = cfg.get("conversation_dirs") or []
    warnings = list(head_warnings)
    branch = restorable_branch(branch, warnings)
    # "checked": this checkpoint passed the checks its restore depends on (see the module doc)
    manifest = {"fingerprint": fp, "head": head, "branch": branch, "unchanged": False,
                "checked": True}  # fmt: skip
    r.run("update-ref", PIN, head)  # in the private git folder: the repo is not written
    base = cfg.get("base") or upstream_base(r, head)
    compression = compressor()
    facts = TreeFacts(cfg.get("tmp") if own_tmp else None, head)
    refused = refused_in_tree(r, staging, warnings, facts.refused)
    written = []  # what a restore writes, uncompressed: checked below
    listed = untracked_entries(records)
    nested = [p for p in listed if p.endswith("/")]
    if nested:
        warnings.append("untracked nested repositories left out: %s" % ", ".join(nested[:5]))
    untracked = select_untracked(repo, listed, cfg["max_untracked"], warnings)
    changed = changed_tracked(records)
    excluded = tracked_left_out(repo, changed, cfg["max_part"], warnings)
    # Paths a checkout refuses cannot be in a restored tree: no patch may name them.
    known = set(refused)  # sets: a tree built by hand can hold 100,000 refused paths
    unsafe = refused + [p for p in changed if checkout_refuses(p) and p not in known]
    gone = set(excluded)
    excluded += [p for p in unsafe if p not in gone]
    gone.update(unsafe)
    find_special(repo, ignored_entries(records), gone, warnings)
    written += [os.lstat(os.path.join(repo, p)).st_size for p in changed
                if p not in gone and os.path.isfile(os.path.join(repo, p))]  # fmt: skip
    gitlinks = r.gitlinks()
    if gitlinks:
        more = " and %d more" % (len(gitlinks) - 5) if len(gitlinks) > 5 else ""
        warnings.append("nested repositories left out (submodules, or repositories git-added "
                        "whole: the index holds each as a commit of its own, so its files and "
                        "history are in no part): %s%s" % (", ".join(gitlinks[:5]), more))
    elif os.path.exists(os.path.join(repo, ".gitmodules")):
        warnings.append("changes inside submodules are not checkpointed")
    ext = ".tar.zst" if compression == "zstd" else ".tar.gz"
    existing_dirs = [d for d in dirs if os.path.lexists(os.path.join(home, d))]
    exchange_dir = cfg.get("exchange_dir")
    exchange = [exchange_dir] if exchange_dir and os.path.lexists(os.path.join(home, exchange_dir)) else []

    def untracked_job():
        if not untracked:
            return None
        if chunked:
            return listing(repo, untracked, cache, sink, warnings, sink.have)
        path = os.path.join(staging, "untracked" + ext)
        archive(repo, untracked, path, compression)
        return path

    def untracked_and_patch_job():
        archived = untracked_job()
        if chunked:  # the untracked files' patch, estimated (PatchSize) as they were read
            return archived, patch_job(sum(e.est for e in archived or () if e.kind == "file"))
        return archived, patch_job(os.path.getsize(archived) if archived else 0)

    def folder_job(part, dirs, what):
        def job():
            if not dirs:
                return None
            members = folder_members(home, dirs, what, warnings, cfg.get("max_restore"), written)
            if not members:
                return None
            if chunked:
                return listing(home, members, cache, sink, warnings, sink.have)
            path = os.path.join(staging, part + ext)
            archive(home, members, path, compression)
            return path

        return job

    counted = {}  # the session patch's size of change, once it is made

    def patch_job(untracked_packed):
        if not base:
            warnings.append("session.patch skipped: no base commit is known")
            return None
        # A patch carries file contents at least as large as they compress, so when the
        # compressed untracked files alone pass the limit, making the patch is wasted work.
        if untracked_packed > cfg["max_patch"]:
            warnings.append(
                "session.patch skipped: the untracked files alone come to %d bytes %s, "
                "over the %d-byte patch limit" % (untracked_packed, "of patch (estimated)"
                                                  if chunked else "compressed", cfg["max_patch"])
            )
            return None
        path, warning = make_session_patch(r, staging, base, untracked, cfg["max_patch"],
                                           excluded)  # fmt: skip
        if warning:
            warnings.append(warning)
        else:
            counted.update(patch_stat(path))
        return path

    produced = run_all(
        {
            "tree size": lambda: head_tree_size(r) if facts.size is None else facts.size,
            "repo.bundle": lambda: make_bundle(r, staging, head, base),
            "wip.patch": lambda: make_wip(r, staging, excluded, staged_new(records)),
            "staged.patch": lambda: make_staged(r, staging, unsafe),
            "untracked": untracked_and_patch_job,
            "agent" + ext: folder_job("agent", existing_dirs, "conversation folders"),
            "exchange" + ext: folder_job("exchange", exchange, "exchange folder"),
        }
    )
    produced["untracked" + ext], produced["session.patch"] = produced.pop("untracked")
    meta = {
        "branch": branch,
        "head": head,
        "base": base,
        "harness": cfg.get("harness"),
        "harness_session": cfg.get("harness_session"),
        "cwd": repo,
        "compression": compression,
        "conversation_dirs": existing_dirs,
        "exchange_dir": exchange_dir,
    }
    meta_path = os.path.join(staging, "meta.json")
    with open(meta_path, "w") as out:
        json.dump(meta, out)
    produced["meta.json"] = meta_path

    if chunked:
        written += [e.size for e in produced.get("untracked" + ext) or () if e.kind == "file"]
        parts = chunked_parts(cfg, produced, ext, sink, warnings)
        cache.save()
        sink.close()
    else:
        written += [os.path.getsize(p) if os.path.isfile(p) else 0 for p in
                    (os.path.join(repo, u) for u in untracked)]  # fmt: skip
        parts = whole_parts(cfg, produced, ext, compression, warnings)
    tree_size = produced.pop("tree size")
    facts.keep(refused, tree_size)
    written.append(tree_size)
    cap = cfg.get("max_restore")
    if cap is not None and sum(written) > cap:
        manifest["checked"] = False
        warnings.append("a restore of this checkpoint would write %d bytes, over the %d-byte "
                        "restore cap (HANGAR_SESSION_MAX_RESTORE_MB): it is not counted as "
                        "known to restore, and older checkpoints are kept"
                        % (sum(written), cap))  # fmt: skip
    manifest.update(base=base, compression=compression, warnings=manifest_warnings(warnings),
                    parts=parts, meta=meta)  # fmt: skip
    if counted:
        manifest["change"] = counted
    if chunked:
        manifest.update(format=2, new=sink.sent, chunks=sink.path)
    return manifest, parts


def chunked_parts(cfg, produced, ext, sink, warnings):
    """Format 2's parts: the listings of the trees (their new chunks already in ``sink``), and
    the files made in staging cut into chunks (new ones into ``sink``). A part over
    ``max_part`` bytes is left out, named."""
    parts = []
    for name in ("meta.json", "repo.bundle", "staged.patch", "wip.patch", "untracked", "agent",
                 "exchange", "session.patch"):
        made = produced.get(name + ext if name in ("untracked", "agent", "exchange") else name)
        if not made:
            continue
        if isinstance(made, list):  # a tree's entries
            size = sum(e.size for e in made if e.kind == "file")
            part = {"name": name, "kind": "tree", "size": size,
                    "entries": [entry_fields(e) for e in made]}  # fmt: skip
        else:
            size = os.path.getsize(made)
            part = {"name": name, "kind": "blob", "size": size, "chunks": None, "path": made}
        if size > cfg["max_part"]:
            warnings.append("%s skipped: %d bytes, over the %d-byte part cap"
                            % (name, size, cfg["max_part"]))  # fmt: skip
            continue
        if part["kind"] == "blob":
            cut = patch_file_chunks if name.endswith(".patch") else chunk_file
            part["chunks"] = [c.cid for c in cut(made, sink)]
            del part["path"]
        parts.append(part)
    return parts


def whole_parts(cfg, produced, ext, compression, warnings):
    """Format 1's parts: each file made in staging, whole, unless over ``max_part``."""
    parts = []
    order = ["meta.json", "repo.bundle", "staged.patch", "wip.patch", "untracked" + ext,
             "agent" + ext, "exchange" + ext, "session.patch"]  # fmt: skip
    for name in order:
        path = produced.get(name)
        if not path:
            continue
        size = os.path.getsize(path)
        if size > cfg["max_part"]:
            warnings.append("%s skipped: %d bytes, over the %d-byte part cap"
                            % (name, size, cfg["max_part"]))  # fmt: skip
            continue
        is_archive = name.endswith((".tar.zst", ".tar.gz"))
        parts.append({"name": name, "size": size,
                      "compression": compression if is_archive else "none", "path": path})  # fmt: skip
    return parts


def manifest_warnings(warnings):
    """The warnings as the manifest carries them: a name that is not UTF-8 escaped readably
    (JSON cannot carry it raw), each warning and their number bounded."""
    out = []
    for warning in warnings[:MAX_WARNINGS]:
        warning = readable(warning)
        if len(warning) > MAX_WARNING_CHARS:
            warning = warning[:MAX_WARNING_CHARS] + " [cut short]"
        out.append(warning)
    if len(warnings) > MAX_WARNINGS:
        out.append("and %d more warnings" % (len(warnings) - MAX_WARNINGS))
    return out


def emit_patch(cfg, r, staging, records, out):
    """Mode ``patch``: write the session patch (base to working tree, untracked files
    included) to ``out``; exit status 4 when it passes ``max_patch``."""
    if not cfg.get("base"):
        raise Failure("the session's base commit is not known")
    ignored = []
    untracked = select_untracked(r.worktree, untracked_entries(records), cfg["max_patch"], ignored)
    excluded = tracked_left_out(r.worktree, changed_tracked(records), cfg["max_patch"], ignored)
    path, warning = make_session_patch(r, staging, cfg["base"], untracked, cfg["max_patch"],
                                       excluded)  # fmt: skip
    if path is None:
        sys.stderr.write("%s\n" % readable(warning))
        sys.exit(4)
    with open(path, "rb") as src:
        shutil.copyfileobj(src, out, 1 << 20)
    out.flush()


def require_sealing():
    """Exit with status SEALING_UNAVAILABLE, before any work, when this sandbox's python
    cannot seal: the control plane then takes the checkpoint through itself."""
    from hangar.agent import sealed

    try:
        sealed.require()
    except sealed.Unavailable as exc:
        sys.stderr.write("cannot seal in this sandbox: %s\n" % exc)
        sys.exit(SEALING_UNAVAILABLE)


def direct_grant(stream, limit=1 << 24):
    """A direct checkpoint's grant, read from ``stream`` (hangar's standard input: never the
    agent's to read), and its source opened (:func:`require_sealing` ran first). A source that
    does not open (a pack gone, a piece altered) reuses nothing: every chunk is sent, as a
    proxied take does."""
    from hangar.agent import manifests, sealed

    grant = json.loads(stream.read(limit))
    if not grant.get("source"):
        return grant, None
    try:
        return grant, manifests.open_source(grant["source"])
    except sealed.SealedError as exc:
        sys.stderr.write("checkpoint: no chunks to reuse (%s)\n" % exc)
        return grant, None


def make_staging(tmp):
    """A new private folder under ``tmp`` (tempfile would cost the quick path its budget)."""
    for _ in range(100):
        path = os.path.join(tmp, STAGING_PREFIX + os.urandom(6).hex())
        try:
            os.mkdir(path, 0o700)
            return path
        except FileExistsError:
            continue
    raise OSError("no free staging name")


def main():
    global shutil, subprocess, threading
    cfg = json.loads(sys.argv[1])
    out = sys.stdout.buffer
    if cfg.get("direct"):
        require_sealing()
    tmp = cfg.get("tmp")
    own_tmp = private_folder(tmp)
    if not tmp or not os.path.isdir(tmp):
        tmp = "/tmp"  # a sandbox without a folder of hangar's own
    try:
        # Every checkpoint has a private git folder of its own: checkpoints share nothing, so
        # none waits for another (and nothing the agent holds can make one wait).
        staging = make_staging(tmp)
    except OSError as exc:
        sys.stderr.write("checkpoint failed: cannot make a staging folder in %s: %s\n" % (tmp, exc))
        sys.exit(3)
    try:
        r = Repo(cfg["repo"], staging)
        head, branch, records, head_warnings = repo_state(r, cfg.get("base"))
        # Before the fingerprint: an edit the index hides must count as a change, or an
        # interval checkpoint would skip it as "unchanged".
        hidden = r.reveal_hidden()
        if hidden:  # their changes are in this status and the patches now
            head, branch, records, head_warnings = repo_state(r, cfg.get("base"))
            shown = ", ".join(hidden[:8]) + (" and %d more" % (len(hidden) - 8)
                                             if len(hidden) > 8 else "")  # fmt: skip
            head_warnings.append("the index hid the changes of %d tracked files "
                                 "(assume-unchanged or skip-worktree): saved all the same, and "
                                 "restored without those bits: %s" % (len(hidden), shown))
        if cfg.get("mode") == "patch":
            import shutil
            import subprocess

            return emit_patch(cfg, r, staging, records, out)
        folders = (cfg.get("conversation_dirs") or []) + [d for d in [cfg.get("exchange_dir")] if d]
        fp = fingerprint(cfg["repo"], cfg["home"], folders, head, branch, records)
        if cfg.get("skip_if_fingerprint") == fp:
            line = {"fingerprint": fp, "head": head, "branch": branch, "unchanged": True}
            out.write(json.dumps(line).encode() + b"\n")
            return
        import shutil
        import subprocess
        import threading

        clean_stale(tmp, keep=staging)
        grant = source = None
        if cfg.get("direct"):
            grant, source = direct_grant(sys.stdin.buffer)
            known = source.known() if source is not None else set()
        else:
            known = read_known(sys.stdin.buffer) if cfg.get("format") == 2 else None
        manifest, parts = pack(cfg, r, staging, head, branch, records, fp, head_warnings,
                               own_tmp, known)  # fmt: skip
        if grant is not None:
            from hangar.agent import direct

            chunks = manifest.pop("chunks")
            sent = {"parts": manifest.pop("parts"), "new": manifest.pop("new")}
            answer = direct.store(grant, sent, chunks, source)
            out.write(json.dumps(dict(manifest, direct=True, **answer)).encode() + b"\n")
            out.flush()
            return
        if known is not None:
            chunks = manifest.pop("chunks")
            out.write(json.dumps(manifest).encode() + b"\n")
            with open(chunks, "rb") as src:
                shutil.copyfileobj(src, out, 1 << 20)
            out.flush()
            return
        listed = [{k: v for k, v in p.items() if k != "path"} for p in parts]
        out.write(json.dumps(dict(manifest, parts=listed)).encode() + b"\n")
        for part in parts:
            with open(part["path"], "rb") as src:
                shutil.copyfileobj(src, out, 1 << 20)
        out.flush()
    except (Failure, GitError) as exc:
        sys.stderr.write("checkpoint failed: %s\n" % exc)
        sys.exit(3)
    finally:
        try:
            remove_tree(staging)
        except OSError:
            pass  # a later checkpoint's clean_stale removes it


if __name__ == "__main__":
    main()
