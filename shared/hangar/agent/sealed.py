"""Direct format-2 checkpoints, the sandbox's side: seal, pack and upload a checkpoint, and read
one back, over signed URLs. Standard library plus ``cryptography`` (imported where it is used):
this module runs under ``python3 -I -S`` in any image with Python 3.9 or later.

Everything here is byte for byte what the control plane writes and reads (either side reads
what the other wrote): the sealed stream of a part (:mod:`hangar.keys.envelope`), a chunk
sealed under a key of its own and named by an HMAC of its cid (:mod:`hangar.checkpoints.chunks`),
the manifest's records as JSON lines cut into compressed pieces and its root as JSON
(:mod:`hangar.checkpoints.manifest`), how a checkpoint reuses its source's chunks and pieces
and moves the chunks still used out of a sparse pack (``ChunkedStore.store``), and a tree part
rebuilt as the plain tar the restore reads (:mod:`hangar.checkpoints.rebuild`).

The control plane grants the objects (JSON, see :func:`store` and :func:`fetch`): each a
request ``{"method", "url", "headers"}`` signed for one object; a PUT is create-only (its
signed ``x-goog-if-generation-match: 0`` header is sent as listed). Every pack and the root go
to the granted keys in order. Any failure raises :class:`SealedError`: a request that fails
(:class:`TransferFailed`, with the status and the store's error code), or data that does not
open, is malformed or is not what its manifest says (:class:`Corrupt`).
"""

import base64
import hashlib
import hmac
import json
import os
import re
import secrets
import zlib
from collections import namedtuple

PART_MAGIC = b"HGR\x01"
PART_CHUNK = 1 << 20
TAG = 16
MAX_PART_CHUNKS = 1 << 24
CHUNK_MAGIC = b"HGC\x01"
NONCE = 12
OVERHEAD = len(CHUNK_MAGIC) + NONCE + TAG
"""Sealed bytes beyond a chunk's plaintext."""
MAX_PACKS = 64
SPARE_PUTS = 3
"""Granted keys a take keeps back from its new chunks (:func:`store`)."""
PACK_TARGET = 8 << 20
READ_SPAN = 8 << 20
GAP = 64 << 10
MOVE_BUDGET = 8 << 20
PIECE_CUT = 48
PIECE_MAX = 32 << 10
MAX_PIECE_PLAIN = 64 << 20
BLOCK = 64 * 1024
"""The largest chunk a checkpoint cuts (:data:`hangar.agent.chunking.BLOCK`)."""
MANIFEST_PART = "manifest"
BLOB_PARTS = ("meta.json", "repo.bundle", "staged.patch", "wip.patch", "session.patch")
TREE_PARTS = ("untracked", "agent", "exchange")
RESTORE_PARTS = ("repo.bundle", "staged.patch", "wip.patch", "untracked", "agent", "exchange")
TIMEOUT = 60
"""Seconds a request may wait for the store to answer (each read of the socket)."""
MAX_ERROR_BODY = 16 << 10
READS_IN_FLIGHT = 4
"""Ranged reads (of up to READ_SPAN bytes each) kept going at once."""
WRITES_IN_FLIGHT = 2
"""Packs being uploaded at once, while the next one fills."""
TAR_BLOCK = 512
_CID = re.compile(r"[0-9a-f]{64}\Z")

Ref = namedtuple("Ref", "owner name pack offset length size key")
Ref.__doc__ = """Where a chunk is stored and how it opens (``ChunkRef``): ``length`` sealed bytes
at ``offset`` in the pack ``pack`` of session ``owner``, sealed under ``key`` (32 bytes) with
associated data naming ``owner`` and ``name``; ``size`` plaintext bytes."""


class SealedError(Exception):
    """A direct checkpoint or restore failed; nothing it returned is to be trusted."""


class TransferFailed(SealedError):
    """A request to the object store failed: ``status`` (None: no answer) and ``code`` (the
    store's error code from its XML body, or what went wrong on the way)."""

    def __init__(self, method, key, status, code):
        super().__init__("%s %s failed: %s %s" % (method, key, status or "no answer", code))
        self.method, self.key, self.status, self.code = method, key, status, code


class Corrupt(SealedError):
    """Data does not open, is malformed, or is not what its manifest says."""


Broken = SealedError
"""The name the checkpoint and restore scripts catch."""


class Unavailable(SealedError):
    """This interpreter cannot seal: ``cryptography``'s AES-GCM does not import or work."""


def require():
    """Check that this interpreter can seal (AES-GCM imports and seals); :class:`Unavailable`
    says why not."""
    try:
        aead = _aead(bytes(32))
        if aead.decrypt(bytes(12), aead.encrypt(bytes(12), b"hangar", b""), b"") != b"hangar":
            raise Unavailable("AES-GCM opened what it sealed to other bytes")
    except Unavailable:
        raise
    except Exception as exc:  # a native module fails to load in many ways: each is the answer
        raise Unavailable("cannot seal with cryptography's AES-GCM: %s: %s"
                          % (type(exc).__name__, exc)) from None  # fmt: skip


# ------------------------------------------------------------------------------ sealing


def _aead(key):
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    return AESGCM(key)


def _invalid_tag():
    from cryptography.exceptions import InvalidTag

    return InvalidTag


def part_aad(session_id, checkpoint_id, part):
    return ("hangar/part\x00%s\x00%s\x00%s" % (session_id, checkpoint_id, part)).encode()


def _part_nonce(prefix, index, last):
    if index >= MAX_PART_CHUNKS:
        raise ValueError("stream too long to seal")
    return prefix + index.to_bytes(3, "big") + (b"\x01" if last else b"\x00")


def seal_bytes(data_key, aad, data):
    """``data`` sealed as :func:`hangar.keys.envelope.seal` seals it: PART_CHUNK-byte chunks,
    then a last shorter one (maybe empty) flagged in its nonce."""
    aead = _aead(data_key)
    prefix = secrets.token_bytes(8)
    full = len(data) // PART_CHUNK
    out = [PART_MAGIC + prefix]
    for index in range(full):
        piece = data[index * PART_CHUNK:(index + 1) * PART_CHUNK]
        out.append(aead.encrypt(_part_nonce(prefix, index, False), piece, aad))
    out.append(aead.encrypt(_part_nonce(prefix, full, True), data[full * PART_CHUNK:], aad))
    return b"".join(out)


def unseal_bytes(data_key, aad, sealed):
    """The plaintext of a sealed stream; :class:`Corrupt` when it is not one, was altered,
    truncated or extended, or was sealed under another key or ``aad``."""
    head = len(PART_MAGIC) + 8
    if len(sealed) < head or not sealed.startswith(PART_MAGIC):
        raise Corrupt("not a sealed hangar stream")
    prefix, body = sealed[len(PART_MAGIC):head], sealed[head:]
    size = PART_CHUNK + TAG
    pieces = [body[at:at + size] for at in range(0, len(body), size)] or [b""]
    aead, invalid = _aead(data_key), _invalid_tag()
    out = []
    for index, piece in enumerate(pieces):
        try:
            out.append(aead.decrypt(_part_nonce(prefix, index, index == len(pieces) - 1),
                                    piece, aad))  # fmt: skip
        except (invalid, ValueError):
            raise Corrupt("sealed data was altered, truncated or bound elsewhere") from None
    return b"".join(out)


def chunk_aad(owner, name):
    return ("hangar/chunk\x00%s\x00%s" % (owner, name)).encode()


def chunk_name(naming_key, cid):
    return hmac.new(naming_key, cid.encode(), hashlib.sha256).hexdigest()


def seal_chunk(key, aad, data):
    nonce = secrets.token_bytes(NONCE)
    return CHUNK_MAGIC + nonce + _aead(key).encrypt(nonce, data, aad)


def open_chunk(key, aad, sealed):
    """The plaintext of a sealed chunk; :class:`Corrupt` when it is not one, was altered, or
    was sealed under another key or associated data."""
    if len(sealed) < OVERHEAD or not sealed.startswith(CHUNK_MAGIC):
        raise Corrupt("a chunk is not sealed by hangar")
    nonce = sealed[len(CHUNK_MAGIC):len(CHUNK_MAGIC) + NONCE]
    try:
        return _aead(key).decrypt(nonce, sealed[len(CHUNK_MAGIC) + NONCE:], aad)
    except (_invalid_tag(), ValueError):
        raise Corrupt("a chunk does not authenticate (altered, or not this session's)") from None


def pack_target(total, packs=MAX_PACKS):
    """The size to fill packs to so that ``total`` sealed bytes take at most ``packs``."""
    return max(PACK_TARGET, -(-total // max(1, packs)))


# ------------------------------------------------------------------------------ transfers


def _error_code(body):
    found = re.search(rb"<Code>([^<]{1,200})</Code>", body)
    return found.group(1).decode("ascii", "replace") if found else "no error code"


def _send(request, key, data=None, headers=None, timeout=TIMEOUT):
    """(status, body) of ``request`` sent with ``data`` and ``headers`` beside its own;
    :class:`TransferFailed` for anything but a 2xx answer read whole."""
    import http.client
    import socket
    import urllib.error
    import urllib.request

    method = request.get("method", "GET")
    sent = dict(request.get("headers") or {})
    sent.update(headers or {})
    if data is not None:
        sent["Content-Length"] = str(len(data))
        if not any(name.lower() == "content-type" for name in sent):
            sent["Content-Type"] = "application/octet-stream"  # urllib would say a form's
    try:
        req = urllib.request.Request(request["url"], data=data, headers=sent, method=method)
    except ValueError:  # the message would quote the URL, whose signature is a secret
        raise TransferFailed(method, key, None, "a malformed request URL") from None
    try:
        with urllib.request.urlopen(req, timeout=timeout) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        try:
            body = exc.read(MAX_ERROR_BODY)
        except (OSError, ValueError):
            body = b""
        finally:
            exc.close()
        raise TransferFailed(method, key, exc.code, _error_code(body)) from None
    except (urllib.error.URLError, socket.timeout, OSError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise TransferFailed(method, key, None, str(reason)[:200] or type(exc).__name__) \
            from None  # fmt: skip


def http_put(request, key, data, timeout=TIMEOUT):
    """PUT ``data`` with ``request`` (the headers it lists, and Content-Length)."""
    _send(request, key, data, timeout=timeout)


def http_get(request, key, start=None, length=None, timeout=TIMEOUT):
    """The object's bytes, or ``length`` bytes from ``start`` (a Range request; fewer where the
    object ends sooner)."""
    if start is None:
        return _send(request, key, timeout=timeout)[1]
    if length <= 0:
        return b""
    status, body = _send(request, key, headers={"Range": "bytes=%d-%d" % (start, start + length - 1)},
                         timeout=timeout)  # fmt: skip
    if status == 200:  # the whole object: the store ignored the range
        return body[start:start + length]
    return body[:length]


def _runs(refs):
    """``refs`` in order, grouped into runs of one pack going forward with small gaps (what
    ``ChunkReader`` reads in one ranged read)."""
    run = []
    for ref in refs:
        if run:
            last, begin = run[-1], run[0].offset
            if (ref.pack != last.pack or ref.offset < last.offset + last.length
                    or ref.offset - (last.offset + last.length) > GAP
                    or ref.offset + ref.length - begin > READ_SPAN):  # fmt: skip
                yield run
                run = []
        run.append(ref)
    if run:
        yield run


def read_sealed(refs, gets, timeout=TIMEOUT):
    """The sealed bytes of each of ``refs``, in order, read with the GET requests ``gets`` (by
    pack key) one ranged read a run of neighbouring chunks, READS_IN_FLIGHT runs at once."""
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(READS_IN_FLIGHT) as pool:
        pending = deque()
        try:
            for run in _runs(refs):
                pending.append(pool.submit(_read_run, run, gets, timeout))
                if len(pending) >= READS_IN_FLIGHT:
                    yield from pending.popleft().result()
            while pending:
                yield from pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()


def _read_run(run, gets, timeout):
    pack = run[0].pack
    if pack not in gets:
        raise SealedError("no read was granted for pack %s" % pack)
    start = run[0].offset
    end = max(r.offset + r.length for r in run)
    data = http_get(gets[pack], pack, start, end - start, timeout)
    out = []
    for ref in run:
        sealed = data[ref.offset - start:ref.offset - start + ref.length]
        if len(sealed) != ref.length:
            raise Corrupt("pack %s ends before a chunk it should hold" % pack)
        out.append(sealed)
    return out


def read_chunks(refs, gets, cids=None, timeout=TIMEOUT):
    """The plaintext of each of ``refs``, in order, each checked: it opens under its key and
    associated data, has its ref's size and, where ``cids`` (one a ref) is given, the SHA-256
    ``cids`` names."""
    for index, (ref, sealed) in enumerate(zip(refs, read_sealed(refs, gets, timeout))):
        plain = open_chunk(ref.key, chunk_aad(ref.owner, ref.name), sealed)
        if len(plain) != ref.size:
            raise Corrupt("a chunk is not the size its manifest says")
        if cids is not None and hashlib.sha256(plain).hexdigest() != cids[index]:
            raise Corrupt("a chunk is not the content its manifest says")
        yield plain


# ------------------------------------------------------------------------------ manifests


def _b64(data):
    return base64.b64encode(data).decode()


def _unb64(text, urlsafe=False):
    import binascii

    if not isinstance(text, str):
        raise ValueError("not base64")
    try:
        if urlsafe:  # pydantic writes bytes URL-safe; read either alphabet as it does
            return base64.urlsafe_b64decode(text.replace("+", "-").replace("/", "_").encode())
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("not base64") from None


def _line(record):
    return json.dumps(record, separators=(",", ":")).encode() + b"\n"


def manifest_lines(parts, refs):
    """The records of a manifest as JSON lines (``manifest_lines``): ``parts`` as
    :class:`Manifest` holds them, ``refs`` the :class:`Ref` of every cid they name."""
    lines, written = [], set()

    def listed(cids):
        for cid in cids:
            if cid not in written:
                written.add(cid)
                r = refs[cid]
                lines.append(_line(["c", cid, r.owner, r.name, r.pack, r.offset, r.length,
                                    r.size, _b64(r.key)]))  # fmt: skip

    for index, part in enumerate(parts):
        if part["kind"] == "blob":
            for cid in part["chunks"]:
                lines.append(_line(["b", index, cid]))
                listed([cid])
            continue
        for path, kind, mode, mtime_ns, size, target, cids in part["entries"]:
            lines.append(_line(["e", index, _b64(path), kind, mode, mtime_ns, size,
                                None if target is None else _b64(target), cids]))  # fmt: skip
            listed(cids)
    return lines


def cut_pieces(lines):
    """``lines`` joined into pieces, cut after each line whose SHA-256 is 0 modulo PIECE_CUT or
    once a piece passes PIECE_MAX bytes."""
    pieces, current, size = [], [], 0
    for line in lines:
        current.append(line)
        size += len(line)
        if size >= PIECE_MAX or int.from_bytes(hashlib.sha256(line).digest()[:4], "big") \
                % PIECE_CUT == 0:  # fmt: skip
            pieces.append(b"".join(current))
            current, size = [], 0
    if current:
        pieces.append(b"".join(current))
    return pieces


class Manifest:
    """A checkpoint's manifest, opened (:func:`open_checkpoint`): ``session_id``,
    ``checkpoint_id``, ``naming_key``; ``parts``, each ``{"name", "kind", "size"}`` with a blob's
    ``chunks`` (cids) or a tree's ``entries`` (path, kind, mode, mtime_ns, size, target,
    cids); ``pieces`` (cid -> :class:`Ref` of the piece holding those lines); ``pack_sizes``;
    ``lines`` (the records); ``chunks`` (cid -> :class:`Ref`, parsed from the lines when first
    asked); ``gets``, the granted reads of its root and packs."""

    def __init__(self, root, lines, gets):
        self.session_id = root["session_id"]
        self.checkpoint_id = root["checkpoint_id"]
        self.naming_key = root["naming_key"]
        self.pieces = dict(root["pieces"])
        self.pack_sizes = root["pack_sizes"]
        self.lines = lines
        self._parts = self._chunks = None
        self._heads = root["parts"]
        self.gets = gets

    @property
    def parts(self):
        if self._parts is None:
            self._parse()
        return self._parts

    @property
    def chunks(self):
        if self._chunks is None:
            self._parse()
        return self._chunks

    def known(self):
        """Its cids as the checkpoint script takes them (``read_known``): a set of hex cids,
        read off the ``["c","<cid>",...`` lines without parsing them."""
        return {line[6:70].decode() for line in self.lines if line.startswith(b'["c","')}

    def known_digests(self):
        """Its cids as 32-byte digests back to back (what the script reads on its input)."""
        return b"".join(bytes.fromhex(cid) for cid in sorted(self.known()))

    def part(self, name):
        return next((p for p in self.parts if p["name"] == name), None)

    def _parse(self):
        parts = [{"name": h[0], "kind": h[1], "size": h[2], "chunks": [], "entries": []}
                 for h in self._heads]  # fmt: skip
        chunks = {}
        try:
            for raw in self.lines:
                record = json.loads(raw)
                if record[0] == "c":
                    _, cid, owner, name, pack, offset, length, size, key = record
                    chunks[cid] = _ref(owner, name, pack, offset, length, size, _unb64(key))
                elif record[0] == "b":
                    parts[_index(record[1])]["chunks"].append(_cid(record[2]))
                elif record[0] == "e":
                    _, index, path, kind, mode, mtime_ns, size, target, cids = record
                    parts[_index(index)]["entries"].append(_entry(
                        _unb64(path), kind, mode, mtime_ns, size,
                        None if target is None else _unb64(target), cids))  # fmt: skip
                else:
                    raise ValueError("an unknown record")
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise Corrupt("a malformed manifest record (%s)" % exc) from None
        for part in parts:
            if part["kind"] == "blob" and part["entries"] or part["kind"] == "tree" and part["chunks"]:
                raise Corrupt("part %s: records of the other kind" % part["name"])
            if {c for c in cids_of(part)} - chunks.keys():
                raise Corrupt("a chunk without its ref")
        self._parts, self._chunks = parts, chunks


def cids_of(part):
    """Every chunk of a part in the order its bytes come: a blob's, or its files'."""
    if part["kind"] == "blob":
        return part["chunks"]
    return [c for e in part["entries"] for c in e[6]]


def _index(value):
    if type(value) is not int or value < 0:
        raise ValueError("a bad part index")
    return value


def _cid(value):
    if not isinstance(value, str) or not _CID.match(value):
        raise ValueError("a bad cid")
    return value


def _natural(value, positive=False):
    if type(value) is not int or value < (1 if positive else 0):
        raise ValueError("a bad number")
    return value


def _ref(owner, name, pack, offset, length, size, key):
    if not all(isinstance(v, str) for v in (owner, name, pack)) or len(key) != 32:
        raise ValueError("a bad chunk ref")
    return Ref(owner, name, pack, _natural(offset), _natural(length, True), _natural(size, True),
               key)  # fmt: skip


def _entry(path, kind, mode, mtime_ns, size, target, cids):
    if kind not in ("file", "dir", "symlink") or (kind == "symlink") != (target is not None):
        raise ValueError("a bad entry")
    if _natural(mode) > 0o7777 or not isinstance(cids, list):
        raise ValueError("a bad entry")
    return (path, kind, mode, _natural(mtime_ns), _natural(size), target, [_cid(c) for c in cids])


def root_json(session_id, checkpoint_id, naming_key, parts, pieces, pack_sizes):
    """The root as ``ManifestRoot.model_dump_json()`` writes it (bytes URL-safe base64)."""
    def key(data):
        return base64.urlsafe_b64encode(data).decode()

    doc = {"format": 2, "session_id": session_id, "checkpoint_id": checkpoint_id,
           "naming_key": key(naming_key),
           "parts": [{"name": p["name"], "kind": p["kind"], "size": p["size"]} for p in parts],
           "pieces": [{"owner": r.owner, "name": r.name, "pack": r.pack, "offset": r.offset,
                       "length": r.length, "size": r.size, "key": key(r.key), "cid": cid}
                      for cid, r in pieces],
           "pack_sizes": pack_sizes}  # fmt: skip
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


def _parse_root(body, session_id, checkpoint_id):
    try:
        doc = json.loads(body)
        if doc["format"] != 2 or doc["session_id"] != session_id \
                or doc["checkpoint_id"] != checkpoint_id:  # fmt: skip
            raise ValueError("another checkpoint's")
        pieces = []
        for p in doc["pieces"]:
            pieces.append((_cid(p["cid"]), _ref(p["owner"], p["name"], p["pack"], p["offset"],
                                                p["length"], p["size"], _unb64(p["key"], True))))
        heads = []
        for h in doc["parts"]:
            if h["kind"] not in ("blob", "tree") or not isinstance(h["name"], str):
                raise ValueError("a bad part")
            heads.append((h["name"], h["kind"], _natural(h["size"])))
        if len({h[0] for h in heads}) != len(heads):
            raise ValueError("a part listed twice")
        sizes = doc.get("pack_sizes", {})
        if not all(isinstance(k, str) and _natural(v) >= 0 for k, v in sizes.items()):
            raise ValueError("bad pack sizes")
        naming_key = _unb64(doc["naming_key"], True)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise Corrupt("checkpoint %s: its manifest is malformed (%s)" % (checkpoint_id, exc)) \
            from None  # fmt: skip
    return {"session_id": session_id, "checkpoint_id": checkpoint_id, "naming_key": naming_key,
            "parts": heads, "pieces": pieces, "pack_sizes": sizes}  # fmt: skip


def open_checkpoint(grant, timeout=TIMEOUT):
    """The :class:`Manifest` of the checkpoint ``grant`` names::

        {"session_id", "checkpoint_id", "data_key": base64, "root": the root's key,
         "gets": {key: request, ...}: the root's and every pack's;
         optional "root_size", "root_sha256": the record's, checked when given}

    Its root is read and unsealed, then its pieces, each checked against its cid."""
    session_id, checkpoint_id = grant["session_id"], grant["checkpoint_id"]
    gets, root_key = grant["gets"], grant["root"]
    if root_key not in gets:
        raise SealedError("no read was granted for the manifest")
    sealed = http_get(gets[root_key], root_key, timeout=timeout)
    body = unseal_bytes(_unb64(grant["data_key"]),
                        part_aad(session_id, checkpoint_id, MANIFEST_PART), sealed)  # fmt: skip
    if "root_size" in grant and len(body) != grant["root_size"] or "root_sha256" in grant \
            and hashlib.sha256(body).hexdigest() != grant["root_sha256"]:  # fmt: skip
        raise Corrupt("checkpoint %s: its manifest does not match its record" % checkpoint_id)
    root = _parse_root(body, session_id, checkpoint_id)
    lines = []
    refs = [ref for _, ref in root["pieces"]]
    for (cid, _), packed in zip(root["pieces"], read_chunks(refs, gets, timeout=timeout)):
        inflate = zlib.decompressobj()
        try:
            plain = inflate.decompress(packed, MAX_PIECE_PLAIN)
        except zlib.error:
            plain = b""
        if inflate.unconsumed_tail or not inflate.eof or hashlib.sha256(plain).hexdigest() != cid:
            raise Corrupt("checkpoint %s: a piece of its manifest is not what its root says"
                          % checkpoint_id)  # fmt: skip
        lines.extend(plain.splitlines(True))
    return Manifest(root, lines, gets)


def open_source(grant_source, timeout=TIMEOUT):
    """The source checkpoint of a take (the grant's ``source``), opened: a :class:`Manifest`
    whose :meth:`~Manifest.known` the checkpoint script is given."""
    return open_checkpoint(grant_source, timeout)


# ------------------------------------------------------------------------------ storing


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
    them) as :class:`Manifest` holds them: a tree's entries decoded, a link's size 0 (as the
    control plane's ``accept`` makes it). :class:`Corrupt` when one is malformed."""
    parts = []
    try:
        for p in sent["parts"]:
            name, kind, size = p["name"], p["kind"], _natural(p["size"])
            if kind == "blob" and name in BLOB_PARTS:
                parts.append({"name": name, "kind": kind, "size": size,
                              "chunks": [_cid(c) for c in p["chunks"]], "entries": []})
            elif kind == "tree" and name in TREE_PARTS:
                entries = []
                for path, ekind, mode, mtime_ns, esize, target, cids in p["entries"]:
                    esize = 0 if ekind == "symlink" else esize
                    entries.append(_entry(_unb64(path), ekind, mode, mtime_ns, esize,
                                          None if target is None else _unb64(target), cids))
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
    the :class:`Manifest` of the checkpoint it reuses (:func:`open_source`), or None.

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
    new = [(_cid(cid), _natural(size, True)) for cid, size in sent["new"]]
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
    sealed = seal_bytes(_unb64(grant["data_key"]), part_aad(session_id, checkpoint_id,
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
