"""``/api/uploads``: context items too large for one request, sent first in parts
(:mod:`hangar.exchange.uploads`). A part's body is its raw bytes, streamed into blobs sealed as
it arrives; the whole is checked on ``complete``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import anyio.from_thread
import anyio.to_thread
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from hangar.operations import wire as s
from hangar.api.routes import Endpoint, param, parse, reply
from hangar.api.sessions import whole
from hangar.models import Token

if TYPE_CHECKING:
    from hangar.runtime import Runtime

MAX_PARTS = 10_000


async def begin(runtime: Runtime, request: Request) -> Response:
    body = await parse(request, s.NewUpload)
    token: Token = request.state.token  # who asked: uploads are counted per token
    upload = await run_in_threadpool(
        lambda: runtime.sessions.uploads.begin(body.kind, token_id=token.id))
    return reply(s.UploadView.of(upload), 201)


async def get(runtime: Runtime, request: Request) -> Response:
    upload = await run_in_threadpool(runtime.sessions.uploads.get, param(request, "id"))
    return reply(s.UploadView.of(upload))


async def put_part(runtime: Runtime, request: Request) -> Response:
    upload_id = param(request, "id")
    n = whole(param(request, "n"), "part", 1, MAX_PARTS)
    body = request.stream().__aiter__()

    async def next_chunk() -> bytes | None:
        try:
            return await body.__anext__()
        except StopAsyncIteration:
            return None

    def chunks() -> Iterator[bytes]:  # runs in the worker thread, pulling from the loop
        while (chunk := anyio.from_thread.run(next_chunk)) is not None:
            if chunk:
                yield chunk

    size = await anyio.to_thread.run_sync(
        lambda: runtime.sessions.uploads.put_part(upload_id, n, chunks()))
    return reply(s.PartView(upload_id=upload_id, part=n, size=size))


async def complete(runtime: Runtime, request: Request) -> Response:
    body = await parse(request, s.CompleteUpload)
    upload_id = param(request, "id")
    upload = await run_in_threadpool(runtime.sessions.uploads.complete, upload_id, body.sha256)
    return reply(s.UploadView.of(upload))


U = "/api/uploads/{id}"
ENDPOINTS = [
    Endpoint("POST", "/api/uploads", "Start an upload of one large context item (a bundle or a "
             "patch over a request's size): answers its upload_id and part size; it expires "
             "after an hour unless used. A token holds at most HANGAR_EXCHANGE_MAX_OPEN_UPLOADS "
             "(20) unused uploads: one more is 429 too_many_uploads", begin, s.NewUpload, s.UploadView, status=201),
    Endpoint("GET", U, "An upload's state", get, response=s.UploadView),
    Endpoint("PUT", U + "/parts/{n}", "Part n (from 1) of the upload: the raw bytes from "
             "(n-1) x part_mb MiB on, at most part_mb MiB and never past max_bytes (413); a "
             "part sent again replaces it", put_part, response=s.PartView,
             raw_body="application/octet-stream"),
    Endpoint("POST", U + "/complete", "Check the parts against the whole's sha256 and the "
             "item's limit; then a context item may name the upload_id", complete,
             s.CompleteUpload, s.UploadView),
]  # fmt: skip
