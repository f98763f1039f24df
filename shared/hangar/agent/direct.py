"""Direct format-2 checkpoints, the sandbox's side (:mod:`hangar.checkpoints.direct`'s
counterpart): seal, pack and upload a checkpoint (:func:`store`), and read one back
(:func:`fetch`), over signed URLs. Standard library plus ``cryptography`` (through
:mod:`hangar.agent.sealed`): runs under ``python3 -I -S`` in any image with Python 3.9 or later.

Everything here is byte for byte what the control plane writes and reads (either side reads
what the other wrote): the chunks sealed as :mod:`hangar.agent.sealed` seals them, the manifest
written as :mod:`hangar.agent.manifests` writes it, how a checkpoint reuses its source's chunks
and pieces and moves the chunks still used out of a sparse pack (``ChunkedStore.store``), and
a tree part rebuilt as the plain tar the restore reads (:mod:`hangar.checkpoints.rebuild`).

The control plane grants the objects (JSON, see :func:`store` and :func:`fetch`): each a
request ``{"method", "url", "headers"}`` signed for one object; a PUT is create-only (its
signed ``x-goog-if-generation-match: 0`` header is sent as listed). Every pack and the root go
to the granted keys in order. Any failure raises :class:`~hangar.agent.sealed.SealedError`: a
request that fails (:class:`~hangar.agent.sealed.TransferFailed`, with the status and the
store's error code), or data that does not open, is malformed or is not what its manifest says
(:class:`~hangar.agent.sealed.Corrupt`).
"""

import hashlib
import os
import secrets
import zlib

from hangar.agent.manifests import (
    MANIFEST_PART,
    checked_cid,
    checked_entry,
    checked_natural,
    cids_of,
    cut_pieces,
    manifest_lines,
    open_checkpoint,
    root_json,
    unb64,
)
from hangar.agent.sealed import (
    OVERHEAD,
    TIMEOUT,
    Corrupt,
    Ref,
    SealedError,
    chunk_aad,
    chunk_name,
    http_put,
    part_aad,
    read_chunks,
    read_sealed,
    seal_bytes,
    seal_chunk,
)

MAX_PACKS = 64
SPARE_PUTS = 3
"""Granted keys a take keeps back from its new chunks (:func:`store`)."""
PACK_TARGET = 8 << 20
MOVE_BUDGET = 8 << 20
BLOB_PARTS = ("meta.json", "repo.bundle", "staged.patch", "wip.patch", "session.patch")
TREE_PARTS = ("untracked", "agent", "exchange")
RESTORE_PARTS = ("repo.bundle", "staged.patch", "wip.patch", "untracked", "agent", "exchange")
WRITES_IN_FLIGHT = 2
"""Packs being uploaded at once, while the next one fills."""
TAR_BLOCK = 512


# ------------------------------------------------------------------------------ storing


def pack_target(total, packs=MAX_PACKS):
    """The size to fill packs to so that ``total`` sealed bytes take at most ``packs``."""
    return max(PACK_TARGET, -(-total // max(1, packs)))


class Packs:
    """Seals chunks of session ``owner`` into packs of about ``target`` bytes written, create-
    only, to the granted ``puts`` in order (``PackWriter``); :meth:`put` writes any other
    object to the next one. ``objects`` holds the size and MD5 of everything written (or
    maybe written: a PUT that failed may have landed), ``sizes`` the packs', ``written`` their
    bytes. Packs upload in the background, WRITES_IN_FLIGHT at once: :meth:`close` returns once
    every one has landed (raising the first failure); :meth:`shutdown` ends the uploads."""

    def __init__(self, puts, owner, naming_key, target, timeout=TIMEOUT):
        self.puts = list(puts)
        self.owner, self.naming_key, self.target = owner, naming_key, target
        self.timeout = timeout
        self.objects, self.sizes, self.written = {}, {}, 0
        self._used = 0
        self._buffer, self._buffered, self._key = [], 0, None
        self._pool, self._inflight = None, []

    def add(self, cid, data):
        """The :class:`Ref` of ``data`` (chunk ``cid``) sealed under a new key into a pack."""
        name = chunk_name(self.naming_key, cid)
        key = secrets.token_bytes(32)
        sealed = seal_chunk(key, chunk_aad(self.owner, name), data)
        pack, offset = self._place(sealed)
        return Ref(self.owner, name, pack, offset, len(sealed), len(data), key)

    def move(self, ref, sealed):
        """``ref``'s chunk (of this owner), whose sealed bytes are ``sealed``, in a pack of
        this writer's: it opens as before (its key and associated data name no pack)."""
        if ref.owner != self.owner or len(sealed) != ref.length:
            raise Corrupt("a chunk to move is not this session's, or not its length")
        pack, offset = self._place(sealed)
        return ref._replace(pack=pack, offset=offset)

    def _place(self, sealed):
        if self._buffered and self._buffered + len(sealed) > self.target:
            self._flush()
        if self._key is None:
            self._key = self._next()
        at = (self._key, self._buffered)
        self._buffer.append(sealed)
        self._buffered += len(sealed)
        return at

    def close(self):
        if self._buffered:
            self._flush()
        self._drain(0)

    def shutdown(self):
        if self._pool is not None:
            for future in self._inflight:
                future.cancel()
            self._pool.shutdown(wait=True)

    def _flush(self):
        size = self._write(self._key, b"".join(self._buffer))
        self.sizes[self._key] = size
        self.written += size
        self._buffer, self._buffered, self._key = [], 0, None

    def _next(self):
        if self._used >= len(self.puts):
            raise SealedError("the checkpoint needs more objects than were granted (%d)"
                              % len(self.puts))  # fmt: skip
        self._used += 1
        return self.puts[self._used - 1]["key"]

    def put(self, data):
        """Write ``data`` to the next granted key; returns that key."""
        key = self._next()
        self._write(key, data)
        self._drain(0)
        return key

    def _write(self, key, data):
        request = self.puts[[p["key"] for p in self.puts].index(key)]
        self.objects[key] = {"size": len(data), "md5": _md5(data)}
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(WRITES_IN_FLIGHT)
        self._drain(WRITES_IN_FLIGHT - 1)
        self._inflight.append(self._pool.submit(http_put, request, key, data, self.timeout))
        return len(data)

    def _drain(self, left):
        """Wait until at most ``left`` uploads are in flight."""
        while len(self._inflight) > left:
            self._inflight.pop(0).result()


def _md5(data):
    try:
        return hashlib.md5(data, usedforsecurity=False).hexdigest()
    except TypeError:  # an OpenSSL-less build without the flag
        return hashlib.md5(data).hexdigest()


def sent_parts(sent):
    """The parts of a format-2 manifest line (``sent["parts"]``, as the checkpoint script lists
    them) as :class:`~hangar.agent.manifests.Manifest` holds them: a tree's entries decoded, a
    link's size 0 (as the control plane's ``accept`` makes it). :class:`Corrupt` when one is
    malformed."""
    parts = []
    try:
        for p in sent["parts"]:
            name, kind, size = p["name"], p["kind"], checked_natural(p["size"])
            if kind == "blob" and name in BLOB_PARTS:
                parts.append({"name": name, "kind": kind, "size": size,
                              "chunks": [checked_cid(c) for c in p["chunks"]], "entries": []})
            elif kind == "tree" and name in TREE_PARTS:
                entries = []
                for path, ekind, mode, mtime_ns, esize, target, cids in p["entries"]:
                    esize = 0 if ekind == "symlink" else esize
                    entries.append(checked_entry(unb64(path), ekind, mode, mtime_ns, esize,
                                                 None if target is None else unb64(target),
                                                 cids))  # fmt: skip
                parts.append({"name": name, "kind": kind, "size": size, "chunks": [],
                              "entries": entries})  # fmt: skip
            else:
                raise ValueError("a bad part %r" % (name,))
    except (KeyError, TypeError, ValueError) as exc:
        raise Corrupt("the checkpoint's manifest line is malformed (%s)" % exc) from None
    if len({p["name"] for p in parts}) != len(parts):
        raise Corrupt("the checkpoint's manifest line lists a part twice")
    return parts


def _check_sizes(parts, refs):
    for part in parts:
        if part["kind"] == "blob":
            if sum(refs[c].size for c in part["chunks"]) != part["size"]:
                raise Corrupt("part %s: its chunks do not add up to its size" % part["name"])
            continue
        for path, kind, _, _, size, _, cids in part["entries"]:
            if kind != "file" and (cids or size) or sum(refs[c].size for c in cids) != size:
                raise Corrupt("part %s: an entry's chunks do not add up to its size"
                              % part["name"])  # fmt: skip
        if sum(e[4] for e in part["entries"]) != part["size"]:
            raise Corrupt("part %s: its files do not add up to its size" % part["name"])


def store(grant, sent, chunks_path, source=None, timeout=TIMEOUT):
    """Seal and upload a checkpoint (``ChunkedStore.store``'s counterpart). ``grant``:
    ``{"session_id", "checkpoint_id", "data_key": base64, "puts": [{"key", "method", "url",
    "headers"}, ...]}``; ``sent``: the checkpoint script's format-2 manifest (its ``parts`` and
    ``new``, [cid, size] of the chunks in the file at ``chunks_path``, in order); ``source``:
    the :class:`~hangar.agent.manifests.Manifest` of the checkpoint it reuses
    (:func:`~hangar.agent.manifests.open_source`), or None.

    New chunks are sealed into packs; the source's chunks are referred to, and the ones still
    used in a sparse pack of this session's are moved (up to MOVE_BUDGET); the manifest's
    pieces equal to the source's are reused unless their pack was emptied; then the root,
    sealed under the data key, goes to the next granted key. Returns the answer::

        {"root": {"key", "size", "stored_size", "sha256"}, "packs": [every pack listed],
         "objects": {key: {"size", "md5"}}, "written": bytes of packs written}

    Raises :class:`SealedError`; objects already written are left for the control plane,
    which deletes whatever it granted and does not record."""
    session_id = grant["session_id"]
    own = source if source is not None and source.session_id == session_id else None
    naming_key = own.naming_key if own is not None else secrets.token_bytes(32)
    parts = sent_parts(sent)
    new = [(checked_cid(cid), checked_natural(size, True)) for cid, size in sent["new"]]
    total = sum(size for _, size in new) + len(new) * OVERHEAD
    # Some granted keys are kept back: the manifest's pieces, the chunks a repack moves and
    # the root come after the new chunks.
    target = pack_target(total, len(grant["puts"]) - SPARE_PUTS)
    packs = Packs(grant["puts"], session_id, naming_key, target, timeout)
    try:
        return _store(grant, parts, new, chunks_path, source, own, packs, timeout)
    finally:
        packs.shutdown()


def _store(grant, parts, new, chunks_path, source, own, packs, timeout):
    session_id, checkpoint_id, naming_key = packs.owner, grant["checkpoint_id"], packs.naming_key
    refs = {}
    with open(chunks_path, "rb") as spool:
        for cid, size in new:
            data = spool.read(size)
            if len(data) != size or hashlib.sha256(data).hexdigest() != cid:
                raise Corrupt("a new chunk does not match its cid")
            refs[cid] = packs.add(cid, data)
    held = source.chunks if source is not None else {}
    used = {}
    for part in parts:
        for cid in cids_of(part):
            ref = refs.get(cid) or held.get(cid)
            if ref is None:
                raise Corrupt("the checkpoint names a chunk it neither sent nor had")
            used[cid] = ref
    _check_sizes(parts, used)
    sizes = dict(own.pack_sizes if own is not None else {})
    sizes.update(packs.sizes)
    evacuated = _repack(used, sizes, packs, source.gets if source is not None else {}, timeout)
    old = source.pieces if source is not None else {}
    pieces = []
    for piece in cut_pieces(manifest_lines(parts, used)):
        cid = hashlib.sha256(piece).hexdigest()
        kept = old.get(cid)
        if kept is None or kept.pack in evacuated:
            kept = packs.add(cid, zlib.compress(piece, 6))
        pieces.append((cid, kept))
    packs.close()
    sizes.update(packs.sizes)
    listed = list(used.values()) + [ref for _, ref in pieces]
    mine = {r.pack for r in listed if r.owner == session_id}
    body = root_json(session_id, checkpoint_id, naming_key, parts, pieces,
                     {p: sizes[p] for p in sorted(mine) if p in sizes})  # fmt: skip
    sealed = seal_bytes(unb64(grant["data_key"]), part_aad(session_id, checkpoint_id,
                                                            MANIFEST_PART), body)  # fmt: skip
    at = packs.put(sealed)
    return {"root": {"key": at, "size": len(body), "stored_size": len(sealed),
                     "sha256": hashlib.sha256(body).hexdigest()},
            "packs": sorted({at} | {r.pack for r in listed}),
            "objects": packs.objects, "written": packs.written}  # fmt: skip


def _repack(used, sizes, packs, gets, timeout):
    """Move the chunks ``used`` still needs out of the owner's packs it uses less than half of
    (sparsest first, up to MOVE_BUDGET bytes), updating ``used`` (``ChunkedStore._repack``).
    Returns the packs emptied of what ``used`` needs."""
    live = {}
    for cid, ref in used.items():
        if ref.owner == packs.owner and ref.pack in sizes:
            live.setdefault(ref.pack, []).append(cid)
    share = {pack: sum(used[c].length for c in cids) / sizes[pack] for pack, cids in live.items()}
    moving, budget = [], MOVE_BUDGET
    for pack in sorted(share, key=share.__getitem__):
        if share[pack] >= 0.5:
            break
        needed = sum(used[c].length for c in live[pack])
        if needed > budget:
            continue
        budget -= needed
        moving += sorted(live[pack], key=lambda c: used[c].offset)
    refs = [used[c] for c in moving]
    for cid, ref, sealed in zip(moving, refs, read_sealed(refs, gets, timeout)):
        used[cid] = packs.move(ref, sealed)
    return {ref.pack for ref in refs}


# ------------------------------------------------------------------------------ fetching


def file_name(part):
    """The name of a part's file in staging: a tree's is its plain tar's (what the restore
    takes it by)."""
    return part["name"] + ".tar" if part["kind"] == "tree" else part["name"]


def fetch(grant, staging, names=RESTORE_PARTS, timeout=TIMEOUT, spend=None):
    """Read the checkpoint ``grant`` names (as :func:`open_checkpoint` takes it) into files in
    the folder ``staging``: each of its parts among ``names``, in that order, a blob as its
    bytes, a tree as the plain tar ``hangar.checkpoints.rebuild.tree_tar`` makes of it. Every
    chunk is checked (it opens, has its size and its cid's content) before its part's file is
    given its name (:func:`file_name`: a tree's ends in ``.tar``); no file there is replaced.
    Returns {part name: path}, in ``names``' order. On any failure it raises (a local one as :class:`SealedError` too),
    having removed every file it made: ``staging`` is left as it was. ``spend(size, what)`` is
    called with a tree's files' bytes before any of them is read (the restore's cap: it
    raises to refuse)."""
    manifest = open_checkpoint(grant, timeout)
    made, out = [], {}
    try:
        for name in names:
            part = manifest.part(name)
            if part is None:
                continue
            if spend is not None and part["kind"] == "tree":
                spend(part["size"], part["name"])
            path = os.path.join(staging, file_name(part))
            tmp = path + ".partial"
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                             | os.O_CLOEXEC, 0o600)  # fmt: skip
                made.append(tmp)
                _write_part(part, manifest.chunks, grant["gets"], fd, timeout)
                os.link(tmp, path)
                made.append(path)
                os.unlink(tmp)
                made.remove(tmp)
            except OSError as exc:
                raise SealedError("cannot write %s in the staging folder: %s"
                                  % (file_name(part), exc.strerror)) from None  # fmt: skip
            out[part["name"]] = path
    except BaseException:
        for path in made:
            try:
                os.unlink(path)
            except OSError:
                pass
        raise
    return out


def _write_part(part, refs, gets, fd, timeout):
    """Write ``part`` to ``fd`` (closed here) as :func:`fetch` gives it."""
    with os.fdopen(fd, "wb") as out:
        cids = cids_of(part)
        _check_sizes([part], refs)
        chunks = read_chunks([refs[c] for c in cids], gets, cids, timeout)
        if part["kind"] == "blob":
            for chunk in chunks:
                out.write(chunk)
            return
        for entry in part["entries"]:
            out.write(tar_header(entry))
            if entry[1] == "file":
                for _ in entry[6]:
                    out.write(next(chunks))
                out.write(bytes(-entry[4] % TAR_BLOCK))
        out.write(bytes(2 * TAR_BLOCK))


_TAR_KINDS = {"file": b"0", "dir": b"5", "symlink": b"2"}
_USTAR_NUMBER = 8 ** 11
_USTAR_TAIL = b"ustar\x0000" + bytes(32 + 32 + 8 + 8 + 155 + 12)
_FIXED_SUM = sum(_USTAR_TAIL) + 8 * 0x20


def tar_header(entry):
    """The header block(s) of a tree entry, as ``hangar.checkpoints.rebuild.header`` builds
    them: a ustar block, after a pax one when a field needs it."""
    path, kind, mode, mtime_ns, size, target, _ = entry
    name = path + b"/" if kind == "dir" else path
    target = (target or b"") if kind == "symlink" else b""
    size = size if kind == "file" else 0
    mtime = mtime_ns // 1000000000
    if (len(name) <= 100 and len(target) <= 100 and _ascii(name) and _ascii(target)
            and size < _USTAR_NUMBER and mtime < _USTAR_NUMBER):  # fmt: skip
        numbers = b"%07o\x00%07o\x00%07o\x00%011o\x00%011o\x00" % (mode & 0o7777, 0, 0, size, mtime)
        checksum = sum(name) + sum(numbers) + _TAR_KINDS[kind][0] + sum(target) + _FIXED_SUM
        return b"".join((name.ljust(100, b"\x00"), numbers, b"%06o\x00 " % checksum,
                         _TAR_KINDS[kind], target.ljust(100, b"\x00"), _USTAR_TAIL))  # fmt: skip
    import tarfile

    info = tarfile.TarInfo(name.decode("utf-8", "surrogateescape"))
    info.type, info.mode, info.size, info.mtime = _TAR_KINDS[kind], mode, size, mtime
    info.linkname = target.decode("utf-8", "surrogateescape")
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


def _ascii(data):
    return all(b < 128 for b in data)
