"""``tools/list`` answered with the bytes the SDK answered it with, once it has answered alike
twice.

A warm ``tools/list`` spent most of its time in the SDK's per-request machinery: a stateless
session built and torn down, the 80 KB answer encoded as JSON and then split into SSE lines,
every time, though the answer never changes while the process runs. :class:`Replay` keeps the
SDK's whole answer (status, headers and body, the request's id cut out) per request shape: the
JSON-RPC body but its id, and every header but the few that cannot change the answer. A shape is
answered from here only after the SDK has answered it twice with the same bytes but for the id
(so nothing that varies per request is ever replayed), and only for a request whose id is an
integer or a plain ASCII string (written exactly as the SDK writes it). Anything else, a
``tools/list`` with params included, goes to the SDK as before.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from starlette.types import Message, Receive, Scope, Send

MAX_BODY = 4096
"""Requests longer than this (or of no declared length) are not read here: never a tools/list."""
MAX_SHAPES = 32
"""At most this many request shapes are kept (clients' headers differ a little)."""
IGNORED = frozenset({b"authorization", b"content-length", b"host", b"user-agent", b"connection",
                     b"accept-encoding"})  # fmt: skip
"""Request headers the SDK's answer does not depend on (the token is checked before, and never
kept)."""
_PLAIN_ID = re.compile(r"[A-Za-z0-9_.:-]{1,64}")

Shape = tuple[str, tuple[tuple[bytes, bytes], ...]]


@dataclass(frozen=True)
class Answer:
    """An answer with its request's id cut out: ``head + id + tail`` is its body."""

    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    head: bytes
    tail: bytes

    @classmethod
    def cut(cls, status: int, headers: list[tuple[bytes, bytes]], body: bytes,
            id_json: bytes) -> Answer | None:  # fmt: skip
        """The answer around the envelope's id (its first ``"id":`` near the start of the
        body), or None when there is none."""
        at = body.find(b'"id":' + id_json, 0, 128)
        if at < 0:
            return None
        start = at + len(b'"id":')
        return cls(status, tuple(headers), body[:start], body[start + len(id_json):])

    def body(self, id_json: bytes) -> bytes:
        return self.head + id_json + self.tail

    def start(self, body: bytes) -> Message:
        """The response's start for ``body``: a Content-Length, if the SDK sent one, counts it
        (ids differ in length)."""
        headers = [(k, str(len(body)).encode() if k.lower() == b"content-length" else v)
                   for k, v in self.headers]  # fmt: skip
        return {"type": "http.response.start", "status": self.status, "headers": headers}


class Replay:
    """Per process: the answers kept, and whether each has been seen twice alike."""

    def __init__(self) -> None:
        self.seen: dict[Shape, Answer] = {}
        self.trusted: dict[Shape, Answer] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send,
                       sdk: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:  # fmt: skip
        """Answer the request from here when its shape is trusted, else through ``sdk``
        (learning from a ``tools/list`` answer as it passes)."""
        headers = list(scope.get("headers") or [])
        declared = dict(headers).get(b"content-length", b"")
        if not declared.isdigit() or int(declared) > MAX_BODY:
            await sdk(scope, receive, send)
            return
        raw, more = b"", True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                await sdk(scope, _again([message], receive), send)  # the client left
                return
            raw += message.get("body", b"")
            more = bool(message.get("more_body", False))
        again = _again([{"type": "http.request", "body": raw, "more_body": False}], receive)
        found = _shape(raw, headers)
        if found is None:
            await sdk(scope, again, send)
            return
        shape, id_json = found
        kept = self.trusted.get(shape)
        if kept is not None:
            body = kept.body(id_json)
            await send(kept.start(body))
            await send({"type": "http.response.body", "body": body})
            return
        start: Message = {}
        chunks: list[bytes] = []

        async def recording(message: Message) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
            await send(message)

        await sdk(scope, again, recording)
        if start.get("status") != 200:
            return
        answer = Answer.cut(200, list(start.get("headers") or []), b"".join(chunks), id_json)
        if answer is None:
            return
        if self.seen.get(shape) == answer:
            self.trusted[shape] = answer
        elif len(self.seen) < MAX_SHAPES:
            self.seen[shape] = answer


def _shape(raw: bytes, headers: list[tuple[bytes, bytes]]) -> tuple[Shape, bytes] | None:
    """A ``tools/list`` request's shape and its id as JSON; None for any other request, or an
    id this module does not write."""
    try:
        request = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(request, dict) or request.get("method") != "tools/list":
        return None
    rid = request.pop("id", None)
    if isinstance(rid, bool) or not isinstance(rid, int | str):
        return None
    if isinstance(rid, str) and not _PLAIN_ID.fullmatch(rid):
        return None
    kept = tuple(sorted((k.lower(), v) for k, v in headers if k.lower() not in IGNORED))
    return (json.dumps(request, sort_keys=True), kept), json.dumps(rid).encode()


def _again(messages: list[Message], receive: Receive) -> Receive:
    """``receive`` with ``messages`` (already read) handed out first."""
    queued = list(messages)

    async def receiving() -> Message:
        if queued:
            return queued.pop(0)
        return await receive()

    return receiving
