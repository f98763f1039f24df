"""Content-addressed chunks of a checkpoint (format 2), the sandbox's side. Standard library
only: this module is shipped into sandboxes with the checkpoint script that imports it.

- A file is cut into fixed blocks of ``BLOCK`` bytes (a file up to ``BLOCK`` bytes is one
  chunk, an empty one none), each named by the SHA-256 of its bytes (``cid``): an edit that
  keeps a file's length changes the one block it falls in, and an append (JSON lines) changes
  only the last block and adds new ones past it. An insertion changes the blocks from it to
  the end of the file.
- A patch (wip, staged, session) is cut before each ``diff --git`` that starts a line, one
  section per file (:func:`split_patch`), each a chunk: joining the sections gives the patch
  back, byte for byte, whatever it holds.
- :class:`StatCache` remembers each file's chunks by its stat (size, mtime, ctime, inode,
  mode), like git's index, so that a file whose stat did not move is not read again. It is
  kept only in a private folder of hangar's (the agent could forge a cache it can write); an
  entry whose ctime is within ``RACY_NS`` of the cache's writing is "racy" (a write in the same
  clock tick leaves the stat as it was) and is hashed again, as git does.

Files are read without following links or blocking on a FIFO (``O_NOFOLLOW | O_NONBLOCK``),
and only when the descriptor opened is the regular file that was stat-ed (same device and
inode): whatever the agent swaps in meanwhile is never followed or read (:class:`Unreadable`).
"""

import json
import os
import stat
from collections import namedtuple

try:
    from _sha256 import sha256  # built in: hashlib would load OpenSSL, a few ms on the quick path
except ImportError:
    from hashlib import sha256

from hangar.agent.paths import private_folder

BLOCK = 64 * 1024
PATCH_CUT = b"\ndiff --git "
RACY_NS = 1_000_000_000
CACHE_NAME = "stat-cache.json"
CACHE_FORMAT = 2
SAMPLE = 4096  # bytes of each block of a binary file compressed to estimate its patch's size
TEXT_PROBE = 8000  # git's test: a file with a NUL in its first 8,000 bytes is binary
MAX_CACHE_BYTES = 1 << 28  # 256 MiB: about a million entries; past that the cache is ignored
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
HEX = frozenset("0123456789abcdef")

Chunk = namedtuple("Chunk", "cid offset size")
Chunk.__doc__ = "A piece of a file or patch: its SHA-256 (hex), where it starts, its length."

Entry = namedtuple("Entry", "path kind mode mtime size target chunks est", defaults=(0,))
Entry.__doc__ = """One manifest entry: ``path`` (bytes, relative to its root), ``kind`` ("file",
"dir" or "symlink"), ``mode`` (the permission bits), ``mtime`` (ns), ``size`` (a file's bytes,
a link's target length, 0 for a folder), ``target`` (a link's, bytes; else None) and ``chunks``
(a file's, in order; else empty); ``est``, a file's estimated bytes in a patch
(:class:`PatchSize`)."""


class Unreadable(Exception):
    """A path that is not, or is no longer, the regular file that was stat-ed: a link, a FIFO,
    a device, a folder, a file swapped in or gone meanwhile, or one that cannot be opened.
    ``why`` reads after the path ("is a FIFO")."""

    def __init__(self, path, why):
        super().__init__("%s %s" % (path, why))
        self.path, self.why = path, why


def open_regular(path, expected=None):
    """(descriptor, fstat) of the regular file at ``path``, opened without following a link or
    blocking. ``expected``: the lstat the caller judged the path by (taken here when None);
    the descriptor must be that same file (device and inode), or it is closed and
    :class:`Unreadable` raised."""
    try:
        before = os.lstat(path) if expected is None else expected
    except OSError as exc:
        raise Unreadable(path, "cannot be stat-ed (%s)" % exc.strerror) from None
    if not stat.S_ISREG(before.st_mode):
        raise Unreadable(path, "is not a regular file")
    try:
        fd = os.open(path, READ_FLAGS)
    except OSError as exc:  # ELOOP: a link swapped in
        raise Unreadable(path, "cannot be opened (%s)" % exc.strerror) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (before.st_dev, before.st_ino):
        os.close(fd)
        raise Unreadable(path, "changed while it was read")
    return fd, st


def chunk_file(target, sink=None):
    """The chunks of a regular file: ``target`` is a path (opened by :func:`open_regular`) or
    a descriptor of one (its fstat must say a regular file; it is not closed). At most the size
    the file had when opened is read, so a file the agent keeps growing still ends; a file cut
    short meanwhile yields what is there. ``sink(cid, data)``, when given, receives each
    chunk's bytes as it is read. Raises :class:`Unreadable`."""
    if isinstance(target, int):
        st = os.fstat(target)
        if not stat.S_ISREG(st.st_mode):
            raise Unreadable("descriptor %d" % target, "is not a regular file")
        return read_chunks(target, st.st_size, sink)
    fd, st = open_regular(target)
    try:
        return read_chunks(fd, st.st_size, sink)
    finally:
        os.close(fd)


def chunk_hash():
    """The SHA-256 that names chunks: hashlib's, OpenSSL's (about five times the built-in one's
    speed where the CPU has SHA extensions), imported at the first chunk hashed only: the
    unchanged check hashes none, and loading OpenSSL costs it a few ms."""
    import hashlib

    return hashlib.sha256


def read_chunks(fd, size, sink=None):
    """Up to ``size`` bytes from ``fd``'s start, as chunks of BLOCK bytes (see chunk_file)."""
    chunks, offset = [], 0
    sha256 = chunk_hash()
    while offset < size:
        want = min(BLOCK, size - offset)
        data = os.pread(fd, want, offset)
        while data and len(data) < want:  # a short read is not yet the block's end
            more = os.pread(fd, want - len(data), offset + len(data))
            if not more:
                break
            data += more
        if not data:
            break  # cut short since it was opened
        chunks.append(named(sha256, data, offset, sink))
        offset += len(data)
    return chunks


def named(sha256, data, offset, sink):
    """The :class:`Chunk` of ``data`` found at ``offset``, passed to ``sink(cid, data)`` when
    one is given."""
    cid = sha256(data).hexdigest()
    if sink is not None:
        sink(cid, data)
    return Chunk(cid, offset, len(data))


def split_patch(data):
    """``data`` (a patch, or any bytes) cut before each ``diff --git`` that starts a line, so
    each file's section is a piece of its own; ``b"".join(split_patch(data)) == data`` always.
    Bytes before the first such line (or all of them, when none) are the first piece; an empty
    ``data`` gives no piece."""
    pieces, start = [], 0
    at = data.find(PATCH_CUT)
    while at != -1:
        cut = at + 1  # the newline stays with the section it ends
        if cut > start:
            pieces.append(data[start:cut])
        start = cut
        at = data.find(PATCH_CUT, cut)
    if start < len(data):
        pieces.append(data[start:])
    return pieces


def patch_chunks(data, sink=None):
    """The chunks of a patch: each piece of :func:`split_patch`, cut into BLOCK-byte blocks
    when longer (``sink`` as in :func:`chunk_file`)."""
    chunks, offset = [], 0
    sha256 = chunk_hash()
    for piece in split_patch(data):
        for at in range(0, len(piece), BLOCK):
            block = piece[at:at + BLOCK]
            chunks.append(named(sha256, block, offset, sink))
            offset += len(block)
    return chunks


def patch_file_chunks(path, sink=None, read_size=1 << 20):
    """:func:`patch_chunks` of the patch in the file at ``path`` (one of hangar's own), read a
    piece at a time: a patch of any size is never held whole."""
    chunks, offset, pending = [], 0, b""
    with open(path, "rb") as src:
        while True:
            data = src.read(read_size)
            pending += data
            if data:
                # Keep what may be the start of a cut, or of a section still being read.
                cut = pending.rfind(PATCH_CUT)
                if cut <= 0:
                    keep = max(0, len(pending) - len(PATCH_CUT)) // BLOCK * BLOCK
                    ready, pending = pending[:keep], pending[keep:]
                else:
                    ready, pending = pending[:cut + 1], pending[cut + 1:]
            else:
                ready, pending = pending, b""
            for chunk in patch_chunks(ready, sink):
                chunks.append(Chunk(chunk.cid, offset + chunk.offset, chunk.size))
            offset += len(ready)
            if not data:
                return chunks


def stat_key(st):
    """The stat facts a cache entry is matched on: (size, mtime, ctime, inode, mode)."""
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_mode)


class StatCache:
    """Each file's chunks by its full path and :func:`stat_key`, kept between checkpoints in
    ``folder`` when that is a private folder of hangar's; anywhere else (or with no folder) it
    starts empty and is never saved. A cache that is unreadable, corrupt, of another format or
    not this user's is ignored whole, never trusted in part. :meth:`save` keeps only the
    entries this run looked up or put (files gone since are dropped)."""

    def __init__(self, folder=None):
        self.path = os.path.join(folder, CACHE_NAME) if folder and private_folder(folder) else None
        self.entries = {}  # full path -> (stat key, chunks)
        self.written_ns = 0
        self.seen = set()
        if self.path:
            loaded = read_cache(self.path)
            if loaded is not None:
                self.written_ns, self.entries = loaded

    def get(self, path, st):
        """The chunks recorded for ``path`` when its stat ``st`` matches in all five facts and
        the entry is not racy; else None (the file is to be hashed again)."""
        self.seen.add(path)
        found = self.entries.get(path)
        if found is None or found[0] != stat_key(st):
            return None
        if st.st_ctime_ns + RACY_NS > self.written_ns:
            return None  # changed within a clock tick of the save: the stat may hide an edit
        return found[1]

    def estimate(self, path):
        """The patch estimate recorded with ``path``'s chunks (0 when none)."""
        found = self.entries.get(path)
        return found[2] if found is not None else 0

    def put(self, path, st, chunks, est=0):
        """Record ``chunks`` (and the patch estimate ``est``) for ``path`` as read under stat
        ``st``, taken before the read (so an edit during the read moves the stat away from the
        entry)."""
        self.seen.add(path)
        self.entries[path] = (stat_key(st), list(chunks), est)

    def save(self, now_ns=None):
        """Write the cache atomically (:func:`replace_file`);
        nothing when it has no private folder or that folder is not private any more.
        ``now_ns``: when it is written (the clock's now; entries changed within RACY_NS before
        it are racy). A failure to write leaves the cache as it was."""
        if not self.path or not private_folder(os.path.dirname(self.path)):
            return
        import time

        written = time.time_ns() if now_ns is None else now_ns
        entries = {path: [*key, [list(c) for c in chunks], est]
                   for path, (key, chunks, est) in self.entries.items() if path in self.seen}
        body = json.dumps({"format": CACHE_FORMAT, "uid": os.geteuid(), "written_ns": written,
                           "entries": entries}, separators=(",", ":")).encode()
        data = body + b"\n" + sha256(body).hexdigest().encode()
        replace_file(self.path, data)


def replace_file(path, data):
    """Write ``data`` (bytes) to ``path`` atomically: to one temporary name beside it (no link
    followed, mode 0600), then a rename. A writer killed meanwhile leaves that one file at
    most, which the next write replaces; a failure leaves ``path`` as it was."""
    tmp = path + ".tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def read_cache(path):
    """(written_ns, entries) from the cache file at ``path``, or None when there is none or it
    is not exactly what :meth:`StatCache.save` writes."""
    try:
        fd = os.open(path, READ_FLAGS)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_size > MAX_CACHE_BYTES:
            return None
        parts, size = [], 0
        while size <= st.st_size:
            data = os.read(fd, 1 << 20)
            if not data:
                break
            parts.append(data)
            size += len(data)
    except OSError:
        return None
    finally:
        os.close(fd)
    body, _, digest = b"".join(parts).rpartition(b"\n")
    if not body or sha256(body).hexdigest().encode() != digest:
        return None
    try:
        doc = json.loads(body)
        return valid_cache(doc)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def valid_cache(doc):
    """(written_ns, entries) of a parsed cache; raises ValueError unless every field is of the
    kind and range save writes and each entry's chunks cover its size exactly."""
    if doc["format"] != CACHE_FORMAT or doc["uid"] != os.geteuid():
        raise ValueError("a foreign cache")
    written = doc["written_ns"]
    if not natural(written):
        raise ValueError("written_ns")
    entries = {}
    for path, entry in doc["entries"].items():
        if not isinstance(path, str) or not path.startswith("/") or len(entry) != 7:
            raise ValueError("an entry")
        *key, chunks, est = entry
        if not natural(est):
            raise ValueError("an estimate")
        if not all(natural(v) for v in key):
            raise ValueError("a stat")
        offset, parsed = 0, []
        for cid, start, length in chunks:
            if not (isinstance(cid, str) and len(cid) == 64 and HEX.issuperset(cid)
                    and start == offset and natural(length) and 0 < length <= BLOCK):
                raise ValueError("a chunk")
            parsed.append(Chunk(cid, start, length))
            offset += length
        if offset != key[0]:
            raise ValueError("chunks that do not cover the file")
        entries[path] = (tuple(key), parsed, est)
    return written, entries


def natural(value):
    return type(value) is int and value >= 0


def listing(root, members, cache, sink=None, warnings=None, have=None):
    """The :class:`Entry` of each of ``members`` (paths relative to ``root``, as
    ``folder_members`` and ``select_untracked`` give them), in their order. A file's chunks
    come from ``cache`` when its stat matches there and ``have(cid)`` is true for each of them
    (the control plane holds them already), else it is read (``sink`` as in
    :func:`chunk_file`) and put in ``cache``. A member gone meanwhile is left out; one that is
    no longer a file, folder or link, or was swapped while read, is left out and named in
    ``warnings``. Nothing is followed: a link is listed as a link."""
    out = []
    for rel in members:
        full = os.path.join(root, rel)
        try:
            st = os.lstat(full)
        except (FileNotFoundError, NotADirectoryError):
            continue
        mode = stat.S_IMODE(st.st_mode)
        name = os.fsencode(rel)
        if stat.S_ISDIR(st.st_mode):
            out.append(Entry(name, "dir", mode, st.st_mtime_ns, 0, None, []))
        elif stat.S_ISLNK(st.st_mode):
            try:
                target = os.readlink(os.fsencode(full))
            except OSError:
                continue  # gone, or no longer a link: the next checkpoint sees what it is
            out.append(Entry(name, "symlink", mode, st.st_mtime_ns, len(target), target, []))
        elif stat.S_ISREG(st.st_mode):
            chunks = cache.get(full, st)
            if chunks is not None and have is not None and not all(have(c.cid) for c in chunks):
                chunks = None  # the control plane lacks some: read them again
            est = cache.estimate(full)
            if chunks is None:
                try:
                    fd, opened = open_regular(full, st)
                except Unreadable as exc:
                    if warnings is not None:
                        warnings.append("%s left out: it %s" % (rel, exc.why))
                    continue
                measure = PatchSize(sink)
                try:
                    chunks = read_chunks(fd, opened.st_size, measure)
                finally:
                    os.close(fd)
                est = measure.total
                if sum(c.size for c in chunks) == opened.st_size:
                    cache.put(full, opened, chunks, est)  # not one cut short while it was read
                st = opened
            size = sum(c.size for c in chunks)
            out.append(Entry(name, "file", mode, st.st_mtime_ns, size, None, chunks, est))
        elif warnings is not None:
            warnings.append("%s left out: it is not a file, folder or link" % rel)
    return out


class PatchSize:
    """What a file adds to a patch, estimated as it is read (passed as a chunk sink, passing
    each chunk on to ``sink``): a text file (no NUL in its first TEXT_PROBE bytes, git's test)
    its bytes, which a patch carries whole; a binary one, which git deflates, each block's size
    scaled by how well its first SAMPLE bytes compress."""

    def __init__(self, sink=None):
        self.sink = sink
        self.total = 0
        self.binary = None

    def __call__(self, cid, data):
        if self.binary is None:
            self.binary = b"\0" in data[:TEXT_PROBE]
            if self.binary:
                import zlib  # only for binary files: the unchanged check never loads it

                self.compress = zlib.compress
        if self.binary:
            sample = data[:SAMPLE]
            self.total += len(data) * len(self.compress(sample, 1)) // len(sample)
        else:
            self.total += len(data)
        if self.sink is not None:
            self.sink(cid, data)


class ChunkSink:
    """The chunks a checkpoint sends out of the sandbox: each chunk the control plane does not
    hold yet (its cid not in ``known``), once, appended to the file at ``path`` in the order
    first seen; ``sent`` lists them as (cid, size). Safe to use from several threads."""

    def __init__(self, path, known):
        import threading

        self.known = known
        self.sent = []
        self._seen = set()
        self._lock = threading.Lock()
        self._out = open(path, "wb")
        self.path = path

    def have(self, cid):
        """Whether the control plane holds, or will hold, chunk ``cid``."""
        return cid in self.known or cid in self._seen

    def __call__(self, cid, data):
        with self._lock:
            if cid in self.known or cid in self._seen:
                return
            self._seen.add(cid)
            self.sent.append((cid, len(data)))
            self._out.write(data)

    def close(self):
        self._out.close()


def read_known(stream, limit=1 << 26):
    """The cids the control plane holds, from ``stream``: their 32-byte digests back to back
    (at most ``limit`` bytes; a stream that is not whole digests gives an empty set: every
    chunk is sent)."""
    data = stream.read(limit + 1)
    if len(data) > limit or len(data) % 32:
        return set()
    return {data[i:i + 32].hex() for i in range(0, len(data), 32)}


def entry_fields(entry):
    """An :class:`Entry` as the manifest line carries it: [path (base64), kind, mode, mtime_ns,
    size, target (base64) or None, [cids]]."""
    import base64

    target = None if entry.target is None else base64.b64encode(entry.target).decode()
    return [base64.b64encode(entry.path).decode(), entry.kind, entry.mode, entry.mtime,
            entry.size, target, [c.cid for c in entry.chunks]]
