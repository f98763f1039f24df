"""``POST /ticks``: where Cloud Tasks delivers ticks to ``hangar serve`` when the ticks backend is
Cloud Tasks and no ticks function is configured (``HANGAR_TICKS_URL`` unset: the server has the
tasks posted to itself).

No bearer token: a tick is a hint (BRIEF invariant 8). The receiver re-reads the due-time from
the db and runs the handler only for a tick that is really due, so a forged or replayed request
costs one state check and reveals nothing (the body of the answer is the outcome word).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

if TYPE_CHECKING:
    from hangar.runtime import Runtime

PATH = "/ticks"


def tick_route(runtime: Runtime) -> Route | None:
    """The route, when the runtime's ticks arrive over HTTP (Cloud Tasks); else None."""
    receiver = runtime.ticks.receiver
    if receiver is None:
        return None

    async def receive(request: Request) -> Response:
        body = await request.body()
        receipt = await run_in_threadpool(receiver.receive, body, runtime.sessions.handle_tick)
        return PlainTextResponse(f"{receipt.outcome}\n", status_code=receipt.status)

    return Route(PATH, receive, methods=["POST"])
