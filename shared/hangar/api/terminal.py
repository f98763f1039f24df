"""The interactive terminal: a websocket to a shell, or to the agent, in the session's repo
folder.

A terminal opens with a ticket, never with the bearer token (a browser would put it in a URL):

1. ``POST /api/sessions/{ref}/terminal-ticket`` (the admin bearer token, as every route;
   ``session_not_found`` otherwise) answers ``{ticket, expires_at}``: a secret valid for
   :data:`~hangar.api.tickets.TICKET_SECONDS` seconds, for one terminal of that session only
   (:mod:`hangar.api.tickets`). With ``{"mode": ...}`` the session is checked as the
   websocket will check it, so a terminal that cannot open is refused here, with its reason
   (a browser learns nothing from a refused websocket).
2. ``GET /api/sessions/{ref}/terminal?ticket=TICKET`` upgrades to a websocket. The ticket is
   the only way in (no ``Authorization`` header, no ``?token=``) and it is used up by this
   first attempt, even if the upgrade then fails for another reason. A missing, unknown, used,
   expired or other session's ticket is refused before accepting: 401 ``unauthorized``.

``mode=shell`` (the default) runs ``bash -i``, with the environment's variables; ``mode=agent``
runs the session's harness resuming its conversation interactively (``claude --resume ID``,
``codex resume ID``, ``pi --session ID``, ``agy --conversation ID``, with the session's
model), with everything a turn gets: the environment's variables and secrets (in the process
environment, never on a command line), ``$HANGAR_IO`` and the harness's settings
(:meth:`~hangar.sessions.service.SessionService.agent_command`); before its first turn has
named a conversation that is 409 ``no_conversation``, and while a turn runs 409
``session_busy``. Either runs under ``script`` (util-linux),
which gives it a pseudo terminal inside the sandbox, sized by the ``rows`` and ``cols`` query
parameters (0 or none: left alone; above 1,000: 1,000), with ``TERM`` from ``term``, as the
agent, in the repo folder (:mod:`hangar.api.pty`). A session without a sandbox is 409
``session_not_running`` (open it first). Frames:

- client to server: binary frames are keystrokes, passed through unchanged; an empty one ends
  the input: the terminal's end-of-file key (Ctrl-D) is typed then, and again every
  :data:`EOF_EVERY_SECONDS` until the program ends (one typed while a command runs, or before
  the shell has started, can be swallowed: a terminal's end-of-file is a keystroke, not the
  end of a pipe), later keystrokes are dropped, and the output still comes until the program
  ends (``bash -i`` ends after what came before). Text frames are control messages, JSON:
  ``{"type": "resize", "rows": R, "cols": C}`` gives the pseudo terminal its new size (the
  program gets SIGWINCH and redraws), in order with the keystrokes around it. Any other text
  frame closes the terminal with 1003 and the reason ``invalid_input: ...`` (text frames
  were keystrokes before: a client that sends keystrokes as text must send binary now);
- server to client: binary frames are the terminal's output;
- when the program ends the server closes with code 1000 and the reason ``exit N``; when it
  could not run, with 1011 and the reason ``CODE: MESSAGE``. Closing the socket hangs up:
  the program's input ends, and if it has not ended :data:`HANGUP_SECONDS` later (an editor,
  a ``sleep``: nobody would see it, and its lease would keep the session up) it is killed
  with everything it started.

A refused upgrade is an HTTP error with the usual JSON body (401, 404, 409, 400) where the
server can send one, else a close before accepting with code 4000 + the status. An open
terminal holds a shell lease, so the session counts as in use while it lasts.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO, cast

import anyio
import anyio.from_thread
import anyio.lowlevel
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from hangar.api import pty, tickets
from hangar.api.routes import Endpoint, Query, param, parse, reply
from hangar.operations.wire import TerminalResize, TerminalTicket, TerminalTicketView
from hangar.api.streams import ClientGone
from hangar.errors import HangarError, InvalidInput, Unauthorized

if TYPE_CHECKING:
    from hangar.runtime import Runtime

logger = logging.getLogger(__name__)

PATH = "/api/sessions/{ref}/terminal"
TICKET_PATH = "/api/sessions/{ref}/terminal-ticket"
SUMMARY = (
    "WebSocket: an interactive shell, or the agent, in the session's repo folder, opened with "
    "a ticket from POST .../terminal-ticket (no bearer token); binary frames both ways, closed "
    'with the reason "exit N" when it ends'
)
QUERY = [
    Query("ticket", "string", "a ticket from POST .../terminal-ticket: required, used up by "
          "this request"),
    Query("mode", "string", "shell (default: bash) or agent (the harness resuming the "
          "session's conversation)"),
    Query("rows", "integer", f"the terminal's height (at most {pty.MAX_SIZE} are used; 0 or "
          'none leaves it alone); later sizes come as text frames {"type": "resize", "rows": '
          'R, "cols": C}'),
    Query("cols", "integer", "the terminal's width (as rows)"),
    Query("term", "string", "TERM for the shell (default xterm-256color)"),
]
MODES = ("shell", "agent")
EOF_KEY = b"\x04"
EOF_EVERY_SECONDS = 1.0
"""How often the end-of-file key is typed again once the input has ended."""
HANGUP_SECONDS = 5.0
"""How long a terminal's program has to end by itself once its client has gone."""
SHELL = ["bash", "-i"]


def _mode(raw: str | None) -> str:
    mode = raw or "shell"
    if mode not in MODES:
        raise InvalidInput(f"mode must be shell or agent, not {mode[:30]!r}", field="mode")
    return mode


async def ticket(runtime: Runtime, request: Request) -> Response:
    """``POST .../terminal-ticket``: a new ticket for the session's terminal."""
    ref = param(request, "ref")
    body = await parse(request, TerminalTicket)

    def make() -> TerminalTicketView:
        if body.mode is None:
            session = runtime.sessions.resolve(ref)
        else:
            session = runtime.sessions.require_running(ref, agent=body.mode == "agent")
        made = tickets.issue(runtime.db, session)
        return TerminalTicketView(ticket=made.secret, expires_at=made.expires_at)

    return reply(await run_in_threadpool(make), 201)


ENDPOINTS = [
    Endpoint("POST", TICKET_PATH, "A ticket for one terminal of the session (the websocket "
             f"at {PATH}?ticket=...): valid {tickets.TICKET_SECONDS} seconds, for one use",
             ticket, TerminalTicket, TerminalTicketView, status=201),
]
"""The terminal's HTTP route (the websocket is :func:`terminal_route`)."""


def _reason(text: str) -> str:
    """A close reason: at most 123 bytes of UTF-8."""
    return text.encode()[:120].decode(errors="ignore")


class _Screen:
    """A binary file for the sandbox to write the terminal's output to: websocket frames."""

    def __init__(self, ws: WebSocket, token: anyio.lowlevel.EventLoopToken) -> None:
        self.ws, self.token = ws, token

    def write(self, data: bytes) -> int:
        try:
            anyio.from_thread.run(self.ws.send_bytes, data, token=self.token)
        except (WebSocketDisconnect, RuntimeError, OSError):
            raise ClientGone() from None
        return len(data)

    def flush(self) -> None:
        pass


async def _deny(ws: WebSocket, exc: HangarError) -> None:
    if "websocket.http.response" in ws.scope.get("extensions", {}):
        await ws.send_denial_response(JSONResponse(exc.to_dict(), status_code=exc.status))
    else:  # no denial responses here: close before accepting, the code says the status
        await ws.close(code=4000 + exc.status, reason=_reason(f"{exc.code}: {exc.message}"))


@dataclass(frozen=True)
class _Admitted:
    """A terminal let in: its session and sandbox, the command line, and the program's extra
    environment (the agent's; None for a shell)."""

    session_id: str
    sandbox_id: str
    argv: list[str]
    env: dict[str, str] | None


def terminal_route(runtime: Runtime) -> WebSocketRoute:
    service = runtime.sessions

    def in_sandbox(sandbox_id: str, argv: list[str], what: str) -> None:
        """Run a small command of the terminal's own (no lease: the terminal holds one); a
        failure is logged, and the terminal goes on."""
        try:
            result = runtime.sandboxes.exec(sandbox_id, argv, timeout=10)
        except HangarError as exc:
            logger.warning("could not %s in sandbox %s: %s", what, sandbox_id, exc)
            return
        if not result.ok:
            logger.warning("could not %s in sandbox %s: exit %d", what, sandbox_id,
                           result.exit_code)  # fmt: skip

    def admit(ref: str, q: Mapping[str, str], device_file: str) -> _Admitted:
        """What to run, once the ticket is used up and everything checked; a HangarError to
        deny the upgrade with otherwise."""
        if "ticket" not in q and "token" in q:
            raise Unauthorized("?token= is not accepted here: get a ticket with POST "
                               "/api/sessions/{ref}/terminal-ticket and pass ?ticket=")  # fmt: skip
        ticketed = tickets.redeem(runtime.db, q.get("ticket"))  # first: used up whatever next
        session = service.resolve(ref)
        if session.id != ticketed:
            raise Unauthorized("this terminal ticket is for another session")
        mode = _mode(q.get("mode"))
        words = pty.setup(q.get("term"), pty.size_of(q.get("rows"), q.get("cols")), device_file)
        if mode == "agent":
            invocation = service.agent_command(session.id)  # no_conversation, not running: 409
            command, env = invocation.argv, invocation.env
            session = service.resolve(session.id)  # as agent_command found it: with a sandbox
        else:
            session = service.require_running(session.id)  # session_not_running: 409
            command, env = SHELL, None
        assert session.sandbox_id is not None
        return _Admitted(session.id, session.sandbox_id, pty.under_script(command, words), env)

    async def terminal(ws: WebSocket) -> None:
        ref = str(ws.path_params["ref"])
        device_file = pty.tty_file()
        try:
            admitted = await run_in_threadpool(admit, ref, dict(ws.query_params), device_file)
        except HangarError as exc:
            await _deny(ws, exc)
            return
        await ws.accept()
        keys: queue.Queue[bytes | None] = queue.Queue()
        ended = anyio.Event()
        token = anyio.lowlevel.current_token()
        screen = cast(BinaryIO, _Screen(ws, token))
        close: list[tuple[int, str]] = []
        hang_up = threading.Event()
        finished = threading.Event()  # the program has ended
        timers: list[threading.Timer] = []
        session_id, sandbox_id = admitted.session_id, admitted.sandbox_id

        def stdin() -> Iterator[bytes]:
            while (chunk := keys.get()) is not None:
                yield chunk

        def end_of_input() -> None:
            while not finished.is_set():
                keys.put(EOF_KEY)
                finished.wait(EOF_EVERY_SECONDS)

        def run() -> None:
            try:
                code = service.exec(session_id, admitted.argv, stdin=stdin(), stdout=screen,
                                    stderr=screen, env=admitted.env,
                                    agent=admitted.env is not None, cancel=hang_up)  # fmt: skip
                close.append((1000, f"exit {code}"))
            except ClientGone:
                close.append((1000, "client gone"))
            except HangarError as exc:
                close.append((1011, f"{exc.code}: {exc.message}"))
            except Exception:  # the shell thread's top level
                logger.exception("terminal in session %s failed", ref)
                close.append((1011, "internal: the terminal failed; see the server's log"))
            finally:
                finished.set()
                for timer in timers:
                    timer.cancel()
                in_sandbox(sandbox_id, pty.forget(device_file), "remove a terminal's file")
                try:
                    anyio.from_thread.run_sync(ended.set, token=token)
                except RuntimeError:
                    pass  # the server is stopping

        async def forward_keys() -> None:
            open_input = True
            try:
                while True:
                    message = await ws.receive()
                    if message["type"] == "websocket.disconnect":
                        return
                    data = message.get("bytes")
                    if data is None:  # a text frame: a control message
                        try:
                            size = TerminalResize.model_validate_json(message.get("text") or "")
                        except ValidationError as exc:
                            error = exc.errors()[0]
                            where = ".".join(str(x) for x in error["loc"]) or "frame"
                            close.append((1003, f"invalid_input: not a control message "
                                                f"({where}: {error['msg']})"))  # fmt: skip
                            return
                        argv = pty.resize(device_file, size.rows, size.cols)
                        await run_in_threadpool(in_sandbox, sandbox_id, argv, "resize a terminal")
                        continue
                    if open_input and not data:  # an empty frame: end of input
                        open_input = False
                        threading.Thread(target=end_of_input, name="hangar-terminal-eof",
                                         daemon=True).start()  # fmt: skip
                    elif open_input:
                        keys.put(data)
            finally:  # the client went, or this handler is cancelled, or the program ended
                keys.put(None)  # the input's end (hangs up the program's terminal)
                if not ended.is_set():  # a timer, not a task: this handler may be going away
                    timer = threading.Timer(HANGUP_SECONDS, hang_up.set)  # then it is killed
                    timer.daemon = True
                    timers.append(timer)
                    timer.start()

        threading.Thread(target=run, name="hangar-terminal", daemon=True).start()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(forward_keys)
            await ended.wait()
            tasks.cancel_scope.cancel()
        if ws.client_state is WebSocketState.CONNECTED:
            code, reason = close[0] if close else (1011, "internal: no exit status")
            try:
                await ws.close(code=code, reason=_reason(reason))
            except (WebSocketDisconnect, RuntimeError, OSError):
                pass  # the client left meanwhile

    return WebSocketRoute(PATH, terminal)
