"""A direct checkpoint's manifest, the sandbox's side (:mod:`hangar.checkpoints.manifest`'s
counterpart): its records as JSON lines cut into compressed pieces (:func:`manifest_lines`,
:func:`cut_pieces`) and its root as JSON (:func:`root_json`), byte for byte what the control
plane writes and reads; and a checkpoint opened over the reads the control plane granted
(:func:`open_checkpoint`, :class:`Manifest`). Standard library and :mod:`hangar.agent.sealed`:
runs under ``python3 -I -S`` with Python 3.9 or later.

A manifest that does not open, is malformed or is not what its root says raises
:class:`~hangar.agent.sealed.Corrupt`; a read that fails,
:class:`~hangar.agent.sealed.TransferFailed` (both :class:`~hangar.agent.sealed.SealedError`).
"""

import base64
import hashlib
import json
import re
import zlib

from hangar.agent.sealed import (
    TIMEOUT,
    Corrupt,
    Ref,
    SealedError,
    http_get,
    part_aad,
    read_chunks,
    unseal_bytes,
)

PIECE_CUT = 48
PIECE_MAX = 32 << 10
MAX_PIECE_PLAIN = 64 << 20
MANIFEST_PART = "manifest"
_CID = re.compile(r"[0-9a-f]{64}\Z")


def _b64(data):
    return base64.b64encode(data).decode()


def unb64(text, urlsafe=False):
    """The bytes of base64 ``text`` (either alphabet when ``urlsafe``); ValueError when it is
    not base64."""
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
                    chunks[cid] = _ref(owner, name, pack, offset, length, size, unb64(key))
                elif record[0] == "b":
                    parts[_index(record[1])]["chunks"].append(checked_cid(record[2]))
                elif record[0] == "e":
                    _, index, path, kind, mode, mtime_ns, size, target, cids = record
                    parts[_index(index)]["entries"].append(checked_entry(
                        unb64(path), kind, mode, mtime_ns, size,
                        None if target is None else unb64(target), cids))  # fmt: skip
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


def checked_cid(value):
    """``value`` when it is a cid (64 lowercase hex digits); ValueError otherwise."""
    if not isinstance(value, str) or not _CID.match(value):
        raise ValueError("a bad cid")
    return value


def checked_natural(value, positive=False):
    """``value`` when it is an int of at least 0 (1 when ``positive``); ValueError otherwise."""
    if type(value) is not int or value < (1 if positive else 0):
        raise ValueError("a bad number")
    return value


def _ref(owner, name, pack, offset, length, size, key):
    if not all(isinstance(v, str) for v in (owner, name, pack)) or len(key) != 32:
        raise ValueError("a bad chunk ref")
    return Ref(owner, name, pack, checked_natural(offset), checked_natural(length, True),
               checked_natural(size, True), key)  # fmt: skip


def checked_entry(path, kind, mode, mtime_ns, size, target, cids):
    """A tree entry as :class:`Manifest` holds it, its fields checked; ValueError when one is
    bad."""
    if kind not in ("file", "dir", "symlink") or (kind == "symlink") != (target is not None):
        raise ValueError("a bad entry")
    if checked_natural(mode) > 0o7777 or not isinstance(cids, list):
        raise ValueError("a bad entry")
    return (path, kind, mode, checked_natural(mtime_ns), checked_natural(size), target,
            [checked_cid(c) for c in cids])  # fmt: skip


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
            pieces.append((checked_cid(p["cid"]), _ref(p["owner"], p["name"], p["pack"],
                                                       p["offset"], p["length"], p["size"],
                                                       unb64(p["key"], True))))  # fmt: skip
        heads = []
        for h in doc["parts"]:
            if h["kind"] not in ("blob", "tree") or not isinstance(h["name"], str):
                raise ValueError("a bad part")
            heads.append((h["name"], h["kind"], checked_natural(h["size"])))
        if len({h[0] for h in heads}) != len(heads):
            raise ValueError("a part listed twice")
        sizes = doc.get("pack_sizes", {})
        if not all(isinstance(k, str) and checked_natural(v) >= 0 for k, v in sizes.items()):
            raise ValueError("bad pack sizes")
        naming_key = unb64(doc["naming_key"], True)
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
    body = unseal_bytes(unb64(grant["data_key"]),
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
