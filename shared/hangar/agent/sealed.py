"""Direct format-2 checkpoints, the sandbox's side: sealing and transfers. Standard library plus
``cryptography`` (imported where it is used): this module, and :mod:`hangar.agent.manifests`
and :mod:`hangar.agent.direct` built on it, run under ``python3 -I -S`` in any image with
Python 3.9 or later.

What it seals and opens is byte for byte what the control plane writes and reads (either side
reads what the other wrote): the sealed stream of a part (:mod:`hangar.keys.envelope`), and a
chunk sealed under a key of its own and named by an HMAC of its cid
(:mod:`hangar.checkpoints.chunks`), read back by ranged reads of its pack (:func:`read_chunks`).

A request is ``{"method", "url", "headers"}``, signed by the control plane for one object; a
PUT is create-only (its signed ``x-goog-if-generation-match: 0`` header is sent as listed).
Any failure raises :class:`SealedError`: a request that fails (:class:`TransferFailed`, with
the status and the store's error code), or data that does not open, is malformed or is not
what its manifest says (:class:`Corrupt`). :func:`require` checks that this interpreter can
seal at all (:class:`Unavailable`).
"""

import hashlib
import hmac
import re
import secrets
from collections import namedtuple

PART_MAGIC = b"HGR\x01"
PART_CHUNK = 1 << 20
TAG = 16
MAX_PART_CHUNKS = 1 << 24
CHUNK_MAGIC = b"HGC\x01"
NONCE = 12
OVERHEAD = len(CHUNK_MAGIC) + NONCE + TAG
"""Sealed bytes beyond a chunk's plaintext."""
BLOCK = 64 * 1024
"""The largest chunk a checkpoint cuts (:data:`hangar.agent.chunking.BLOCK`)."""
READ_SPAN = 8 << 20
GAP = 64 << 10
TIMEOUT = 60
"""Seconds a request may wait for the store to answer (each read of the socket)."""
MAX_ERROR_BODY = 16 << 10
READS_IN_FLIGHT = 4
"""Ranged reads (of up to READ_SPAN bytes each) kept going at once."""

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
