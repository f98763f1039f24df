"""``/api/sessions``: the session service over HTTP. ``{ref}`` is a session's id or name.

Two endpoints stream:

- ``POST .../exec`` answers ``application/x-ndjson``, one JSON object a line: ``{"stdout":
  BASE64}`` and ``{"stderr": BASE64}`` as the command writes, then exactly one last line,
  ``{"exit": CODE}`` or ``{"error": {"code", "message"}}`` (the status line was sent before
  the command ran, so a failure arrives in the stream).
- ``GET .../log?follow=true`` answers the turn's run log as plain text, growing as the turn
  writes it, and ends when the turn has finished (the whole log, from its first byte).
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, BinaryIO, cast, get_args
from urllib.parse import quote

from starlette.concurrency import iterate_in_threadpool, run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from hangar.operations import sessions as ops, transcripts, wire as s
from hangar.api.routes import NDJSON, Endpoint, Query, flag, param, parse, reply, run_waiting
from hangar.api.streams import ClientGone, Emitter, in_thread
from hangar.db import SessionOrder
from hangar.errors import HangarError, InvalidInput
from hangar.harnesses.events import EventLines
from hangar.models import NAME_MAX, SessionState
from hangar.sessions import pull

if TYPE_CHECKING:
    from hangar.runtime import Runtime
    from hangar.sessions.service import SessionService

logger = logging.getLogger(__name__)

TEXT = "text/plain; charset=utf-8"
DIFF = "text/x-diff; charset=utf-8"
FOLLOW_SLICE = 60.0
"""Seconds between checks, while following a quiet turn's log, that the reader is still there."""
DEFAULT_PAGE, MAX_PAGE = 50, 500


async def create(runtime: Runtime, request: Request) -> Response:
    body = await parse(request, s.NewSession)
    return reply(await run_in_threadpool(ops.new, runtime, body), 202)


async def list_all(runtime: Runtime, request: Request) -> Response:
    limit = _int_query(request, "limit", 1, MAX_PAGE, DEFAULT_PAGE)
    cursor = request.query_params.get("cursor") or None
    state = _state_query(request)
    prefix = request.query_params.get("prefix") or None  # checked by the service
    order = _order_query(request)

    return reply(await run_in_threadpool(
        lambda: ops.page(runtime, limit, cursor, state=state, prefix=prefix, order=order)))


STATES = tuple(state.value for state in SessionState)
ORDERS: tuple[SessionOrder, ...] = get_args(SessionOrder)


def _order_query(request: Request) -> SessionOrder:
    """The ``order`` query parameter (absent or empty: ``created``); InvalidInput naming the
    field and listing the orders otherwise."""
    raw = request.query_params.get("order") or "created"
    for order in ORDERS:
        if raw == order:
            return order
    raise InvalidInput(f"order must be one of {', '.join(ORDERS)}, not {raw[:30]!r}",
                       field="order", allowed=list(ORDERS))  # fmt: skip


def _state_query(request: Request) -> SessionState | None:
    """The ``state`` query parameter (absent or empty: None); InvalidInput naming the field
    and listing the states otherwise."""
    raw = request.query_params.get("state") or None
    if raw is None:
        return None
    try:
        return SessionState(raw)
    except ValueError:
        raise InvalidInput(f"state must be one of {', '.join(STATES)}, not {raw[:30]!r}",
                           field="state", allowed=list(STATES)) from None  # fmt: skip


async def get(runtime: Runtime, request: Request) -> Response:
    return reply(await run_in_threadpool(ops.get, runtime, param(request, "ref")))


async def open_(runtime: Runtime, request: Request) -> Response:
    ref = param(request, "ref")
    body = await parse(request, s.Open)
    view = await run_in_threadpool(ops.open_, runtime, ref, body)
    return reply(view, 202 if view.state == SessionState.STARTING.value else 200)


async def send(runtime: Runtime, request: Request) -> Response:
    body = await parse(request, s.SendMessage)
    ref = param(request, "ref")
    return reply(await run_in_threadpool(ops.send, runtime, ref, body), 202)


async def steer(runtime: Runtime, request: Request) -> Response:
    body = await parse(request, s.Steer)
    ref = param(request, "ref")
    return reply(await run_in_threadpool(ops.steer, runtime, ref, body), 202)


async def decide(runtime: Runtime, request: Request) -> Response:
    body = await parse(request, s.Decision)
    ref, approval = param(request, "ref"), param(request, "approval")
    return reply(await run_in_threadpool(ops.decide, runtime, ref, approval, body))


async def interrupt(runtime: Runtime, request: Request) -> Response:
    ref = param(request, "ref")
    return reply(await run_in_threadpool(ops.interrupt, runtime, ref), 202)


async def wait(runtime: Runtime, request: Request) -> Response:
    body = await parse(request, s.Wait)
    ref = param(request, "ref")
    return reply(await run_waiting(request, lambda: ops.wait(runtime, ref, body)))


async def suspend(runtime: Runtime, request: Request) -> Response:
    return reply(await run_in_threadpool(ops.suspend, runtime, param(request, "ref")))


async def archive(runtime: Runtime, request: Request) -> Response:
    return reply(await run_in_threadpool(ops.archive, runtime, param(request, "ref")))


async def keep(runtime: Runtime, request: Request) -> Response:
    body = await parse(request, s.Keep)
    ref = param(request, "ref")
    return reply(await run_in_threadpool(ops.keep, runtime, ref, body))


async def delete(runtime: Runtime, request: Request) -> Response:
    ref, force = param(request, "ref"), flag(request, "force")
    await run_in_threadpool(lambda: ops.delete(runtime, ref, force=force))
    return Response(status_code=204)


async def fork(runtime: Runtime, request: Request) -> Response:
    body = await parse(request, s.Fork)
    return reply(await run_in_threadpool(ops.fork, runtime, param(request, "ref"), body), 202)


async def artifacts(runtime: Runtime, request: Request) -> Response:
    ref, n = param(request, "ref"), _turn_query(request)
    return reply(await run_in_threadpool(ops.artifacts, runtime, ref, n))


async def artifact(runtime: Runtime, request: Request) -> Response:
    ref, path = param(request, "ref"), param(request, "path")
    n = whole(param(request, "turn"), "turn", 1, s.MAX_TURN)
    data = await run_in_threadpool(ops.artifact, runtime, ref, n, path)
    return Response(data, media_type="application/octet-stream",
                    headers={"Content-Disposition": attachment(path.rsplit("/", 1)[-1])})


async def tree(runtime: Runtime, request: Request) -> Response:
    ref = param(request, "ref")
    n = whole(param(request, "turn"), "turn", 1, s.MAX_TURN)
    step = whole(param(request, "step"), "step", 0, 1 << 20)
    return reply(await run_in_threadpool(ops.tree, runtime, ref, n, step))


async def progress(runtime: Runtime, request: Request) -> Response:
    cursor = _int_query(request, "cursor", 0, 2**53, 0)
    return reply(await run_in_threadpool(ops.progress, runtime, param(request, "ref"), cursor))


async def patch(runtime: Runtime, request: Request) -> Response:
    data = await run_in_threadpool(ops.patch, runtime, param(request, "ref"))
    return Response(data, media_type=DIFF)


async def pull_(runtime: Runtime, request: Request) -> Response:
    package = await run_in_threadpool(runtime.sessions.pull, param(request, "ref"))
    name = f"{package.info.session}-{package.info.checkpoint}.tar"
    return StreamingResponse(iterate_in_threadpool(package.tar()), media_type=pull.MEDIA,
                             headers={"Content-Disposition": attachment(name)})


def attachment(name: str) -> str:
    """The Content-Disposition that downloads as ``name``, whatever it holds (RFC 6266):
    ``filename`` with printable ASCII only (anything else, and ``"``, ``\\`` and ``%``, as
    ``_``) for clients that know no better, and, when that is not the name itself, the exact
    name as ``filename*`` (RFC 5987: UTF-8, percent-encoded). Header values are Latin-1: the
    name as it is would fail the answer."""
    fallback = "".join(c if " " <= c <= "~" and c not in '"\\%' else "_" for c in name)
    header = f'attachment; filename="{fallback}"'
    if fallback == name:
        return header
    exact = quote(name.encode("utf-8", "replace"), safe="!#$&+-.^_`|~")
    return f"{header}; filename*=UTF-8''{exact}"


def _int_query(request: Request, name: str, low: int, high: int, default: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    return whole(raw, name, low, high)


def whole(raw: str, name: str, low: int, high: int) -> int:
    """``raw`` as a whole number from ``low`` to ``high``; InvalidInput naming ``name``."""
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise InvalidInput(f"{name} must be a whole number from {low} to {high}, not {raw[:30]!r}",
                           field=name)  # fmt: skip
    return int(raw)


def _turn_query(request: Request) -> int | None:
    raw = request.query_params.get("turn")
    if raw is None or raw == "":
        return None
    return _int_query(request, "turn", 1, s.MAX_TURN, 1)


LOG_FORMATS = ("raw", "lines", "events")


async def log(runtime: Runtime, request: Request) -> Response:
    ref, n = param(request, "ref"), _turn_query(request)
    follow = request.query_params.get("follow", "").lower() in ("1", "true", "yes")
    form = request.query_params.get("format") or "raw"
    if form not in LOG_FORMATS:
        raise InvalidInput(f"format must be one of {', '.join(LOG_FORMATS)}", field="format")
    if form == "events":  # a page of the transcript: read on with its cursor, never a stream
        limit = _int_query(request, "limit", 1, transcripts.MAX_LIMIT, transcripts.DEFAULT_LIMIT)
        cursor = request.query_params.get("cursor") or None
        return reply(await run_in_threadpool(transcripts.page, runtime, ref, n, cursor, limit))
    lines = EventLines() if form == "lines" else None
    if not follow:
        data = await run_in_threadpool(runtime.sessions.log, ref, n)
        if lines is not None:
            data = lines.feed(data) + lines.close()
        return Response(data, media_type=TEXT)
    # Unknown sessions and turns are plain errors, before the stream starts.
    turn = await run_in_threadpool(lambda: runtime.sessions.wait(ref, n, timeout=0))
    return StreamingResponse(
        in_thread(lambda emit: _follow(runtime.sessions, ref, turn.n, emit, lines), "log"),
        media_type=TEXT,
    )


def _follow(service: SessionService, ref: str, n: int, emit: Emitter,
            lines: EventLines | None = None) -> None:  # fmt: skip
    """Emit turn ``n``'s run log as it grows, then the rest of it once the turn is over;
    rendered by ``lines`` when given."""
    sent = 0

    def out(data: bytes) -> None:
        emit(lines.feed(data) if lines is not None else data)
    while True:
        seen = 0  # every wait reads the live log from its start: skip what was sent

        def feed(chunk: bytes) -> None:
            nonlocal seen, sent
            start, seen = seen, seen + len(chunk)
            if seen > sent:
                out(chunk[max(0, sent - start) :])
                sent = seen

        turn = service.wait(ref, n, timeout=FOLLOW_SLICE, on_output=feed)
        if turn.finished_at is not None:
            break
        emit.check()  # ClientGone once the reader has left
    out(service.log(ref, n)[sent:])
    if lines is not None:
        emit(lines.close())


class _Frames:
    """A binary file for the sandbox to write a stream to: each write is one NDJSON frame."""

    def __init__(self, stream: str, frame: Callable[[dict[str, object]], None]) -> None:
        self.stream, self.frame = stream, frame

    def write(self, data: bytes) -> int:
        self.frame({self.stream: base64.b64encode(data).decode()})
        return len(data)

    def flush(self) -> None:
        pass


async def exec_(runtime: Runtime, request: Request) -> Response:
    body = await parse(request, s.Exec)
    ref = param(request, "ref")
    await run_in_threadpool(runtime.sessions.resolve, ref)  # a missing session is a plain 404

    def work(emit: Emitter) -> None:
        def frame(obj: dict[str, object]) -> None:
            emit(json.dumps(obj).encode() + b"\n")

        try:
            code = runtime.sessions.exec(
                ref, body.argv, stdin=body.stdin, timeout=body.timeout,
                stdout=cast(BinaryIO, _Frames("stdout", frame)),
                stderr=cast(BinaryIO, _Frames("stderr", frame)),
            )  # fmt: skip
        except ClientGone:
            raise
        except HangarError as exc:
            frame(exc.to_dict())
            return
        except Exception:  # the stream's top level: the status line is gone, say it here
            logger.exception("exec in session %s failed", ref)
            frame({"error": {"code": "internal", "message": "internal error; see the log"}})
            return
        frame({"exit": code})

    return StreamingResponse(in_thread(work, "exec"), media_type=NDJSON)


S = "/api/sessions/{ref}"
ENDPOINTS = [
    Endpoint("POST", "/api/sessions", "Create a session and ask for its first turn; answers at "
             "once, the session STARTING (its phase says where) and the turn's number", create,
             s.NewSession, s.StartedView, status=202),
    Endpoint("GET", "/api/sessions", "One page of sessions, newest first by creation or by "
             "last activity (no turns or checkpoints), only those state and prefix keep when "
             "given; next_cursor asks for the next page (give it the same order and filters)",
             list_all,
             response=s.SessionPage, query=[
                 Query("limit", "integer", f"sessions a page (1-{MAX_PAGE}, default "
                       f"{DEFAULT_PAGE})"),
                 Query("cursor", "string", "the previous page's next_cursor"),
                 Query("state", "string", f"only sessions in this state: {', '.join(STATES)}"),
                 Query("prefix", "string", "only sessions whose name starts with this "
                       f"(case-sensitive; at most {NAME_MAX} characters, no NUL)"),
                 Query("order", "string", "created (the default: by creation) or activity "
                       "(by last activity: a turn's start and end, a shell); both newest first"),
             ]),
    Endpoint("GET", S, "A session with its turns and checkpoints", get,
             response=s.SessionView),
    Endpoint("DELETE", S, "Delete the session, its sandbox and everything it stored; 409 "
             "session_busy while a turn starts or runs, unless force", delete, status=204,
             query=[Query("force", "boolean", "delete it even while a turn runs (its work is "
                          "lost)")]),
    Endpoint("POST", S + "/open", "Resume the session into a sandbox (restoring its work), on "
             "another harness or model when given: 200 when it has one, else 202 and STARTING "
             "(follow its phase with GET)", open_, s.Open, s.SessionView, status=202),
    Endpoint("POST", S + "/send", "Ask for the next turn (resuming a suspended session first); "
             "answers at once with the turn's number; a plain message to a running live turn "
             "steers it (delivered: steer) unless if_idle; 409 session_busy while a turn that "
             "cannot take it runs", send, s.SendMessage, s.StartedView, status=202),
    Endpoint("POST", S + "/steer", "Tell the running turn's agent something in the same turn "
             "(delivered: steer); 409 turn_ended when expected_turn is over, session_busy while "
             "a one-shot turn runs; with no turn running and no expected_turn, it starts the "
             "next turn", steer, s.Steer, s.StartedView, status=202),
    Endpoint("POST", S + "/approvals/{approval}", "Approve or deny what the running turn's agent "
             "waits to do (its id from pending_approvals); 404 approval_not_found when none "
             "such waits (unknown, answered already, or its turn over)", decide, s.Decision,
             s.Decided),
    Endpoint("POST", S + "/interrupt", "Stop the running turn (a live one is asked to stop, its "
             "conversation kept): it ends interrupted and its work is checkpointed (follow it "
             "with wait); 409 invalid_state when no turn runs",
             interrupt, response=s.StartedView, status=202),
    Endpoint("POST", S + "/wait", "Wait up to timeout seconds for a turn to finish", wait,
             s.Wait, s.TurnView),
    Endpoint("POST", S + "/keep", "Set the idle timeout (0: never suspend for idleness)", keep,
             s.Keep, s.SessionSummary),
    Endpoint("POST", S + "/suspend", "Checkpoint, release the sandbox, SUSPENDED", suspend,
             response=s.SessionSummary),
    Endpoint("POST", S + "/archive", "Drop the sandbox and checkpoints; keep the record",
             archive, response=s.SessionSummary),
    Endpoint("POST", S + "/fork", "Restore one checkpoint into n new sessions, each answered "
             "at once STARTING", fork, s.Fork, s.SessionSummary, many=True, status=202),
    Endpoint("POST", S + "/exec", "Run a command in the session's repo folder (409 "
             'session_not_running without a sandbox: open it first); NDJSON lines {"stdout"|"stderr": base64}, then {"exit": '
             'code} or {"error": {...}}', exec_, s.Exec, media=NDJSON),
    Endpoint("GET", S + "/patch", "Base to working tree, untracked files included: live from "
             "the sandbox, else from the newest checkpoint", patch, media=DIFF),
    Endpoint("GET", S + "/pull", "The newest checkpoint's commits (a bundle) and uncommitted "
             "changes (a patch), as a tar of pull.json, repo.bundle and changes.patch: what "
             "hangar session pull applies locally", pull_, media=pull.MEDIA),
    Endpoint("GET", S + "/artifacts", "The files its turns handed back, stored (new or changed "
             "ones per turn)", artifacts, response=s.ArtifactView, many=True,
             query=[Query("turn", "integer", "only this turn's")]),
    Endpoint("GET", S + "/artifacts/{turn}/{path:path}", "Download one artifact of a turn",
             artifact, media="application/octet-stream"),
    Endpoint("GET", S + "/turns/{turn}/trees/{step}", "One step of a live turn: the working "
             "tree's git tree after it and its patch against the turn's first tree (kept with "
             "the session: no sandbox needed)", tree, response=s.TreeView),
    Endpoint("GET", S + "/progress", "The progress lines the running turn wrote "
             "(hangar-agent progress) after cursor, and the cursor to ask from next", progress,
             response=s.ProgressView,
             query=[Query("cursor", "integer", "the previous answer's cursor (default 0: from "
                          "the turn's first line)")]),
    Endpoint("GET", S + "/log", "A turn's run log, also after its sandbox is gone: as text, or "
             "with format=events one page of its transcript as JSON (TranscriptPage: the same "
             "events for every harness)", log, response=transcripts.TranscriptPage,
             media=TEXT, query=[
                 Query("turn", "integer", "the turn (default: the latest)"),
                 Query("follow", "boolean", "stream the log as it grows until the turn ends "
                       "(raw and lines)"),
                 Query("format", "string", "raw (default: the harness's JSON lines as they are), "
                       "lines (each event said in one line for people: tool calls, the "
                       "assistant's text, model API retries) or events (a JSON page of the "
                       "transcript: message, tool_call, tool_result, usage, notice, outcome)"),
                 Query("cursor", "string", "events: the previous page's next_cursor (default: "
                       "the turn's first event)"),
                 Query("limit", "integer", f"events: events a page (1-{transcripts.MAX_LIMIT}, "
                       f"default {transcripts.DEFAULT_LIMIT})"),
             ]),
]  # fmt: skip
