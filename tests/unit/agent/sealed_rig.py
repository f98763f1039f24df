"""A signed-URL stand-in for the sealed checkpoint tests: a tiny HTTP server over a folder of
blobs answering the XML API's object PUT (create-only by its ``x-goog-if-generation-match: 0``
header) and ranged GET, with GCS's XML error bodies; and a checkpoint script's format-2 take of
a folder, made with the script's own chunking code."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from hangar.agent.chunking import ChunkSink, StatCache, chunk_file, entry_fields, listing
from hangar.blobs.local import LocalBlobs
from hangar.errors import AlreadyExists, BlobNotFound
from hangar.checkpoints.chunks import MAX_PACKS, pack_key
from hangar.models import Checkpoint

BUCKET = "bucket"


@dataclass
class Store:
    """The stand-in's address and what it was asked: (method, key, Range header or None)."""

    blobs: LocalBlobs
    base: str
    log: list[tuple[str, str, str | None]] = field(default_factory=list)

    def request(self, method: str, key: str) -> dict[str, Any]:
        headers = {"x-goog-if-generation-match": "0"} if method == "PUT" else {}
        return {"method": method, "url": f"{self.base}/{BUCKET}/{key}", "headers": headers}

    def puts(self, session_id: str, count: int = MAX_PACKS + 1) -> list[dict[str, Any]]:
        """Granted PUTs to ``count`` pack keys of ``session_id``, named as the control plane
        names packs."""
        return [{"key": key, **self.request("PUT", key)}
                for key in (pack_key(session_id) for _ in range(count))]  # fmt: skip

    def grant(self, session_id: str, checkpoint_id: str, data_key: bytes) -> dict[str, Any]:
        import base64

        return {"session_id": session_id, "checkpoint_id": checkpoint_id,
                "data_key": base64.b64encode(data_key).decode(), "puts": self.puts(session_id)}  # fmt: skip

    def read_grant(self, checkpoint: Checkpoint, data_key: bytes) -> dict[str, Any]:
        """What the control plane grants to read ``checkpoint``: its root and every pack."""
        import base64

        root = checkpoint.parts[0].key
        assert root is not None
        return {"session_id": checkpoint.session_id, "checkpoint_id": checkpoint.id,
                "data_key": base64.b64encode(data_key).decode(), "root": root,
                "root_size": checkpoint.parts[0].size, "root_sha256": checkpoint.parts[0].sha256,
                "gets": {k: self.request("GET", k) for k in checkpoint.packs}}  # fmt: skip

    def puts_of(self, method: str) -> list[str]:
        return [key for m, key, _ in self.log if m == method]


def _error(code: str) -> bytes:
    return (f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code>"
            f"<Message>{code}</Message></Error>").encode()  # fmt: skip


@contextmanager
def signed_store(blobs: LocalBlobs) -> Iterator[Store]:
    store = Store(blobs, "")

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _key(self) -> str | None:
            prefix = f"/{BUCKET}/"
            return self.path[len(prefix):] if self.path.startswith(prefix) else None

        def _answer(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_PUT(self) -> None:  # noqa: N802 (the stdlib's name)
            key = self._key()
            data = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            store.log.append(("PUT", key or "", None))
            if key is None or self.headers.get("x-goog-if-generation-match") != "0":
                return self._answer(403, _error("AccessDenied"))
            try:
                blobs.put(key, data, if_absent=True)
            except AlreadyExists:
                return self._answer(412, _error("PreconditionFailed"))
            self._answer(200, b"")

        def do_GET(self) -> None:  # noqa: N802
            key = self._key()
            wanted = self.headers.get("Range")
            store.log.append(("GET", key or "", wanted))
            try:
                data = blobs.get(key or "")
            except BlobNotFound:
                return self._answer(404, _error("NoSuchKey"))
            if wanted is None:
                return self._answer(200, data)
            first, last = (int(v) for v in wanted.removeprefix("bytes=").split("-"))
            if first >= len(data):
                return self._answer(416, _error("InvalidRange"))
            part = data[first : last + 1]
            self._answer(206, part, {"Content-Range": f"bytes {first}-{first + len(part) - 1}"
                                                      f"/{len(data)}"})  # fmt: skip

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    store.base = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield store
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def take(tree: Path, blobs: dict[str, bytes], chunks: Path,
         known: set[str]) -> dict[str, Any]:  # fmt: skip
    """The format-2 manifest line the checkpoint script makes of the blob parts ``blobs`` and
    the folder ``tree`` (as its ``untracked`` part), the chunks the control plane lacks (not in
    ``known``) written to ``chunks``: the script's own chunking, as ``chunked_parts`` uses it."""
    sink = ChunkSink(str(chunks), known)
    parts: list[dict[str, Any]] = []
    for name, data in blobs.items():
        path = chunks.parent / f"blob-{name}"
        path.write_bytes(data)
        parts.append({"name": name, "kind": "blob", "size": len(data),
                      "chunks": [c.cid for c in chunk_file(str(path), sink)]})  # fmt: skip
    members = []
    for top, dirs, files in os.walk(tree):
        dirs.sort()
        for name in sorted(dirs) + sorted(files):
            members.append(os.path.relpath(os.path.join(top, name), tree))
    entries = listing(str(tree), members, StatCache(None), sink)
    parts.append({"name": "untracked", "kind": "tree",
                  "size": sum(e.size for e in entries if e.kind == "file"),
                  "entries": [entry_fields(e) for e in entries]})  # fmt: skip
    sink.close()
    return {"format": 2, "parts": parts, "new": sink.sent}
