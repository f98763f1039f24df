"""Bounds on what a request may carry, checked before anything reads it.

:class:`BodyLimit` is ASGI middleware capping request bodies at ``max_bytes``: a declared
``Content-Length`` over the cap gets 413 ``payload_too_large`` without a byte read; a body that
arrives without one (chunked) is counted as it is read, and the read that crosses the cap raises
:class:`~hangar.errors.PayloadTooLarge` (which the app answers as 413). :func:`find_nul` finds a
NUL byte anywhere in a parsed body: one is refused, since no name, argument, variable or message
can carry one through a command line, a file name or a database key intact; :func:`checked`
reads a request into its model with both checks, for REST's bodies and MCP's arguments alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hangar.errors import InvalidInput, PayloadTooLarge

M = TypeVar("M", bound=BaseModel)


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    def _error(self, size: int | None) -> PayloadTooLarge:
        mib = self.max_bytes / 2**20
        said = f" ({size} bytes)" if size is not None else ""
        return PayloadTooLarge(f"the request body{said} is over this server's limit of "
                               f"{mib:g} MiB (HANGAR_MAX_BODY_MB)", limit=self.max_bytes)  # fmt: skip

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            error = self._error(int(declared))
            await JSONResponse(error.to_dict(), status_code=error.status,
                               headers={"Connection": "close"})(scope, receive, send)  # fmt: skip
            return
        seen, started = 0, False

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise self._error(None)
            return message

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, sending)
        except PayloadTooLarge as exc:  # a route that does not map errors itself
            if started:
                raise
            await JSONResponse(exc.to_dict(), status_code=exc.status)(scope, receive, send)


def find_nul(value: object, where: str = "") -> str | None:
    """The path (``vars.KEY``, ``argv.2``) of the first string in ``value`` holding a NUL
    byte, keys included; None when there is none."""
    if isinstance(value, str):
        return (where or "body") if "\x00" in value else None
    if isinstance(value, Mapping):
        for key, item in value.items():
            path = f"{where}.{key}" if where else str(key)
            if isinstance(key, str) and "\x00" in key:
                return path.replace("\x00", "\\0")
            found = find_nul(item, path)
            if found:
                return found
    elif isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        for i, item in enumerate(value):
            found = find_nul(item, f"{where}.{i}" if where else str(i))
            if found:
                return found
    return None


def checked(model: type[M], data: bytes | Mapping[str, Any], *, what: str = "request",
            whole: str = "body") -> M:  # fmt: skip
    """``data`` (JSON text, or a mapping already parsed) as ``model``. InvalidInput naming the
    first field that is wrong, or holds a NUL byte, as ``invalid WHAT: FIELD: why`` (``whole``
    names the data itself when no field is to blame)."""
    try:
        if isinstance(data, bytes):
            parsed = model.model_validate_json(data)
        else:
            parsed = model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or whole
        raise InvalidInput(f"invalid {what}: {where}: {first['msg']}", field=where) from None
    nul = find_nul(parsed.model_dump())  # bytes (stdin) may hold anything
    if nul:
        raise InvalidInput(f"invalid {what}: {nul}: must not contain a NUL byte", field=nul)
    return parsed
