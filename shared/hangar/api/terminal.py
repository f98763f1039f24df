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
``session_busy``. Either runs as a supervised process of the sandbox (:mod:`hangar.processes`)
on a pseudo terminal, sized by the ``rows`` and ``cols`` query parameters (0 or none: left
alone; above 1,000: 1,000), with ``TERM`` from ``term``, as the agent, in the repo folder; one
exec carries its keystrokes, resizes and output both ways (:mod:`hangar.api.pty`). A session
without a sandbox is 409 ``session_not_running`` (open it first). Frames:

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
  with everything it started. The same happens, inside the sandbox, when the server itself
  goes away: a terminal never outlives its connection.

A refused upgrade is an HTTP error with the usual JSON body (401, 404, 409, 400) where the
server can send one, else a close before accepting with code 4000 + the status. An open
terminal holds a shell lease, so the session counts as in use while it lasts.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

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
from hangar.errors import HangarError, InvalidInput, Unauthorized
from hangar.operations.wire import TerminalResize, TerminalTicket, TerminalTicketView
from hangar.processes import Processes, Terminal
from hangar.sessions.workspace import repo_dir_for

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
    """The terminal's output as websocket frames, sent from the program's thread; once the
    client has gone, output is dropped (the program is being hung up)."""

    def __init__(self, ws: WebSocket, token: anyio.lowlevel.EventLoopToken) -> None:
        self.ws, self.token, self.gone = ws, token, False

    def write(self, data: bytes) -> None:
        if self.gone:
            return
        try:
            anyio.from_thread.run(self.ws.send_bytes, data, token=self.token)
        except (WebSocketDisconnect, RuntimeError, OSError):
            self.gone = True


async def _deny(ws: WebSocket, exc: HangarError) -> None:
    if "websocket.http.response" in ws.scope.get("extensions", {}):
        await ws.send_denial_response(JSONResponse(exc.to_dict(), status_code=exc.status))
    else:  # no denial responses here: close before accepting, the code says the status
        await ws.close(code=4000 + exc.status, reason=_reason(f"{exc.code}: {exc.message}"))


@dataclass(frozen=True)
class _Admitted:
    """A terminal let in: its session and sandbox, the program, its working folder and
    environment, its pseudo terminal, and whether it is the agent's (an agent lease)."""

    session_id: str
    sandbox_id: str
    argv: list[str]
    cwd: str
    env: dict[str, str]
    terminal: Terminal
    agent: bool


async def _forward(ws: WebSocket, program: pty.Program, close: list[tuple[int, str]]) -> None:
    """Pass the client's frames to the program until the client goes (or sends a frame that
    is neither keys nor a control message); then hang it up."""
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
                program.resize(size.rows, size.cols)
            elif data:
                program.type(data)
            else:  # an empty frame: the end of input
                program.end_input()
    finally:  # the client went, or this handler is cancelled, or the program ended
        program.hang_up()


def terminal_route(runtime: Runtime) -> WebSocketRoute:
    service = runtime.sessions

    def admit(ref: str, q: Mapping[str, str]) -> _Admitted:
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
        terminal = pty.terminal_of(q.get("term"), pty.size_of(q.get("rows"), q.get("cols")))
        if mode == "agent":
            invocation = service.agent_command(session.id)  # no_conversation, not running: 409
            command, env = invocation.argv, dict(invocation.env)
            session = service.resolve(session.id)  # as agent_command found it: with a sandbox
        else:
            session = service.require_running(session.id)  # session_not_running: 409
            command, env = SHELL, {}
        assert session.sandbox_id is not None
        variables = service.environments.require(session.environment).vars
        return _Admitted(session.id, session.sandbox_id, list(command),
                         repo_dir_for(session.repo or ""), {**variables, **env}, terminal,
                         mode == "agent")  # fmt: skip

    def run(admitted: _Admitted, program: pty.Program, close: list[tuple[int, str]]) -> None:
        """The program, from its start to its end, holding the terminal's lease meanwhile;
        how the websocket is to close goes in ``close``."""
        try:
            with service.lease(admitted.session_id, agent=admitted.agent):
                code = program.run(admitted.argv, cwd=admitted.cwd, env=admitted.env,
                                   terminal=admitted.terminal)  # fmt: skip
            close.append((1000, f"exit {code}") if code is not None else
                         (1011, "internal: no exit status"))  # fmt: skip
        except HangarError as exc:
            close.append((1011, f"{exc.code}: {exc.message}"))
        except Exception:  # the terminal thread's top level
            logger.exception("terminal in session %s failed", admitted.session_id)
            close.append((1011, "internal: the terminal failed; see the server's log"))

    async def terminal(ws: WebSocket) -> None:
        try:
            admitted = await run_in_threadpool(admit, str(ws.path_params["ref"]),
                                               dict(ws.query_params))  # fmt: skip
        except HangarError as exc:
            await _deny(ws, exc)
            return
        await ws.accept()
        screen = _Screen(ws, anyio.lowlevel.current_token())
        program = pty.Program(Processes(runtime.sandboxes, admitted.sandbox_id), screen.write,
                              eof_key=EOF_KEY, eof_every=EOF_EVERY_SECONDS,
                              hang_up_after=HANGUP_SECONDS)  # fmt: skip
        close: list[tuple[int, str]] = []
        ended = anyio.Event()
        token = anyio.lowlevel.current_token()

        def run_then_say() -> None:  # a thread of its own: a terminal may last for hours
            try:
                run(admitted, program, close)
            finally:
                try:
                    anyio.from_thread.run_sync(ended.set, token=token)
                except RuntimeError:
                    pass  # the server is stopping

        threading.Thread(target=run_then_say, name="hangar-terminal", daemon=True).start()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_forward, ws, program, close)
            await ended.wait()
            tasks.cancel_scope.cancel()
        if ws.client_state is WebSocketState.CONNECTED:
            code, reason = close[0] if close else (1011, "internal: no exit status")
            try:
                await ws.close(code=code, reason=_reason(reason))
            except (WebSocketDisconnect, RuntimeError, OSError):
                pass  # the client left meanwhile

    return WebSocketRoute(PATH, terminal)
