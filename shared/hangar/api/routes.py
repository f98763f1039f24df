"""The route table's pieces: what an endpoint is, and the helpers handlers share.

A handler is ``async (runtime, request) -> Response``; the app wraps each with the bearer-token
check and the error mapping, and the OpenAPI document is built from the same table, so the two
cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import anyio
import anyio.to_thread
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from hangar.operations.limits import checked
from hangar.errors import InvalidInput

if TYPE_CHECKING:
    from hangar.runtime import Runtime

Handler = Callable[["Runtime", Request], Awaitable[Response]]
M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")

LONG_CALLS = 256
"""How many calls that wait (up to minutes) on a turn may run at once."""

JSON = "application/json"
NDJSON = "application/x-ndjson"


@dataclass(frozen=True)
class Query:
    """A query parameter, for the OpenAPI document."""

    name: str
    type: str
    description: str


@dataclass(frozen=True)
class Endpoint:
    """One route and what the OpenAPI document says about it. ``response`` is the body's
    model on success (a list of them when ``many``); ``media`` the body's type otherwise."""

    method: str
    path: str
    summary: str
    handler: Handler
    body: type[BaseModel] | None = None
    response: type[BaseModel] | None = None
    many: bool = False
    status: int = 200
    media: str = JSON
    query: Sequence[Query] = ()
    raw_body: str | None = None
    """The media type of a body that is raw bytes rather than a JSON ``body`` model."""


async def parse(request: Request, model: type[M]) -> M:
    """The request's JSON body as ``model`` (an empty body is ``{}``); InvalidInput naming the
    first field that is wrong, or holds a NUL byte."""
    return checked(model, await request.body() or b"{}")


def reply(model: BaseModel | Sequence[BaseModel], status: int = 200) -> JSONResponse:
    """A JSON response from a model (or a list of them)."""
    if isinstance(model, BaseModel):
        return JSONResponse(model.model_dump(mode="json"), status_code=status)
    return JSONResponse([m.model_dump(mode="json") for m in model], status_code=status)


def param(request: Request, name: str) -> str:
    """A path parameter; InvalidInput when it holds a NUL byte."""
    value = str(request.path_params[name])
    if "\x00" in value:
        raise InvalidInput(f"invalid request: {name} must not contain a NUL byte", field=name)
    return value


def flag(request: Request, name: str) -> bool:
    """A true/false query parameter (absent: false); InvalidInput for anything else."""
    raw = request.query_params.get(name, "false").lower()
    if raw not in ("true", "false", "1", "0", ""):
        raise InvalidInput(f"{name} must be true or false, not {raw[:30]!r}", field=name)
    return raw in ("true", "1")


async def run_waiting(request: Request, func: Callable[[], T]) -> T:
    """Run ``func``, which may block for minutes waiting on a turn, in a thread that does not
    take one of the shared pool's (so waiters cannot starve every other request)."""
    limiter = getattr(request.app.state, "waiting", None)
    if limiter is None:
        limiter = request.app.state.waiting = anyio.CapacityLimiter(LONG_CALLS)
    return await anyio.to_thread.run_sync(func, limiter=limiter)
