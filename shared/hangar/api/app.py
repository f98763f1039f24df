"""The REST API (BRIEF §4, wave 1) as a Starlette app over the runtime's session service.

Every route needs a bearer token with the admin scope, except the OpenAPI document. Errors are
``{"error": {"code", "message", ...}}`` with the error's status; anything unexpected is a 500
``internal`` whose details go to the log, not to the client. Service calls block, so they run in
the thread pool.
"""

from __future__ import annotations

import base64
import json
import logging
import queue
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute

from hangar.api import schemas as s
from hangar.api.auth import authenticate
from hangar.errors import HangarError, InvalidInput
from hangar.runtime import Runtime

logger = logging.getLogger(__name__)

Handler = Callable[[Request], Awaitable[Response]]


@dataclass(frozen=True)
class Endpoint:
    """One route, with what the OpenAPI document says about it."""

    method: str
    path: str
    summary: str
    handler: Handler
    body: type[BaseModel] | None = None
    response: type[BaseModel] | None = None
    many: bool = False
    status: int = 200
    media: str = "application/json"


def _json(model: BaseModel | list[Any], status: int = 200) -> JSONResponse:
    if isinstance(model, list):
        content: Any = [m.model_dump(mode="json") for m in model]
    else:
        content = model.model_dump(mode="json")
    return JSONResponse(content, status_code=status)


async def _body(request: Request, model: type[Any]) -> Any:
    raw = await request.body()
    try:
        return model.model_validate_json(raw or b"{}")
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise InvalidInput(f"invalid request: {where}: {first['msg']}", field=where) from None


def create_app(runtime: Runtime) -> Starlette:
    """The ASGI app. The caller owns the runtime (and starts its ticker)."""
    service = runtime.sessions

    def guarded(handler: Handler) -> Handler:
        async def run(request: Request) -> Response:
            try:
                await run_in_threadpool(
                    authenticate, runtime.db, request.headers.get("authorization")
                )
                return await handler(request)
            except HangarError as exc:
                return JSONResponse(exc.to_dict(), status_code=exc.status)
            except Exception:  # the top-level handler: log it, tell the client nothing more
                logger.exception("unexpected error in %s %s", request.method, request.url.path)
                body = {"error": {"code": "internal", "message": "internal error; see the log"}}
                return JSONResponse(body, status_code=500)

        return run

    def ref(request: Request) -> str:
        return str(request.path_params["ref"])

    async def list_sessions(request: Request) -> Response:
        def views() -> list[s.SessionView]:
            out = []
            for session in service.list_sessions():
                turns = runtime.db.list_turns(session.id)
                out.append(s.SessionView.of(session, summary=turns[-1].summary if turns else None))
            return out

        return _json(await run_in_threadpool(views))

    async def create_session(request: Request) -> Response:
        body: s.NewSession = await _body(request, s.NewSession)
        detail = await run_in_threadpool(
            lambda: service.new(body.name, body.message, body.env, harness=body.harness,
                                model=body.model, title=body.title,
                                idle_minutes=body.idle_minutes)  # fmt: skip
        )
        return _json(s.SessionView.of(detail), 201)

    async def get_session(request: Request) -> Response:
        return _json(s.SessionView.of(await run_in_threadpool(service.get, ref(request))))

    async def open_session(request: Request) -> Response:
        return _json(s.SessionView.of(await run_in_threadpool(service.open, ref(request))))

    async def send(request: Request) -> Response:
        body: s.SendMessage = await _body(request, s.SendMessage)
        turn = await run_in_threadpool(service.send, ref(request), body.message)
        return _json(s.TurnView.of(turn), 202)

    async def wait(request: Request) -> Response:
        body: s.Wait = await _body(request, s.Wait)
        turn = await run_in_threadpool(
            lambda: service.wait(ref(request), body.turn, timeout=body.timeout)
        )
        return _json(s.TurnView.of(turn))

    async def keep(request: Request) -> Response:
        body: s.Keep = await _body(request, s.Keep)
        session = await run_in_threadpool(service.keep, ref(request), body.idle_minutes)
        return _json(s.SessionView.of(session))

    async def suspend(request: Request) -> Response:
        return _json(s.SessionView.of(await run_in_threadpool(service.suspend, ref(request))))

    async def archive(request: Request) -> Response:
        return _json(s.SessionView.of(await run_in_threadpool(service.archive, ref(request))))

    async def delete(request: Request) -> Response:
        await run_in_threadpool(service.delete, ref(request))
        return Response(status_code=204)

    async def fork(request: Request) -> Response:
        body: s.Fork = await _body(request, s.Fork)
        forks = await run_in_threadpool(service.fork, ref(request), body.n)
        return _json([s.SessionView.of(f) for f in forks], 201)

    async def patch(request: Request) -> Response:
        data = await run_in_threadpool(service.patch, ref(request))
        return Response(data, media_type="text/x-diff")

    async def log(request: Request) -> Response:
        turn = request.query_params.get("turn")
        if turn is not None and not turn.isdigit():
            raise InvalidInput("turn must be a number", turn=turn)
        data = await run_in_threadpool(service.log, ref(request), int(turn) if turn else None)
        return Response(data, media_type="text/plain; charset=utf-8")

    async def exec_(request: Request) -> Response:
        body: s.Exec = await _body(request, s.Exec)
        stdin = base64.b64decode(body.stdin) if body.stdin else None
        session = ref(request)
        await run_in_threadpool(service.resolve, session)  # a missing session is a plain 404
        lines: queue.Queue[bytes | None] = queue.Queue()

        class Sink:
            def __init__(self, stream: str) -> None:
                self.stream = stream

            def write(self, data: bytes) -> int:
                lines.put(json.dumps({self.stream: base64.b64encode(data).decode()}).encode())
                return len(data)

        def run() -> None:
            try:
                code = service.exec(session, body.argv, stdin=stdin, stdout=Sink("stdout"),  # type: ignore[arg-type]
                                    stderr=Sink("stderr"), timeout=body.timeout)  # type: ignore[arg-type]  # fmt: skip
                lines.put(json.dumps({"exit": code}).encode())
            except HangarError as exc:
                lines.put(json.dumps(exc.to_dict()).encode())
            except Exception:  # reported in the stream: the response has started
                logger.exception("exec in %s failed", session)
                lines.put(json.dumps({"error": {"code": "internal", "message": "exec failed"}}).encode())
            finally:
                lines.put(None)

        threading.Thread(target=run, daemon=True).start()

        async def stream() -> AsyncIterator[bytes]:
            while (line := await run_in_threadpool(lines.get)) is not None:
                yield line + b"\n"

        return StreamingResponse(stream(), media_type="application/x-ndjson")

    async def list_envs(request: Request) -> Response:
        envs = await run_in_threadpool(service.environments.list)
        return _json([s.EnvironmentView.of(e) for e in envs])

    async def create_env(request: Request) -> Response:
        body: s.NewEnvironment = await _body(request, s.NewEnvironment)
        env = await run_in_threadpool(
            lambda: service.environments.add(body.name, body.repo, branch=body.branch,
                                             setup=body.setup, vars=body.vars,
                                             secrets=body.secrets)  # fmt: skip
        )
        return _json(s.EnvironmentView.of(env), 201)

    async def delete_env(request: Request) -> Response:
        await run_in_threadpool(service.environments.delete, str(request.path_params["name"]))
        return Response(status_code=204)

    async def list_sandboxes(request: Request) -> Response:
        infos = await run_in_threadpool(runtime.sandboxes.list)
        return _json([s.SandboxView(id=i.id, labels=dict(i.labels), created_at=i.created_at)
                      for i in infos])  # fmt: skip

    async def destroy_sandbox(request: Request) -> Response:
        sandbox_id = str(request.path_params["id"])
        await run_in_threadpool(runtime.sandboxes.get, sandbox_id)
        await run_in_threadpool(runtime.sandboxes.destroy, sandbox_id)
        return Response(status_code=204)

    S = "/api/sessions/{ref}"
    endpoints = [
        Endpoint("POST", "/api/sessions", "Create a session and start its first turn",
                 create_session, s.NewSession, s.SessionView, status=201),
        Endpoint("GET", "/api/sessions", "List sessions, newest first", list_sessions,
                 response=s.SessionView, many=True),
        Endpoint("GET", S, "A session with its turns and checkpoints", get_session,
                 response=s.SessionView),
        Endpoint("POST", S + "/open", "Resume the session into a sandbox", open_session,
                 response=s.SessionView),
        Endpoint("POST", S + "/send", "Start the next turn", send, s.SendMessage, s.TurnView,
                 status=202),
        Endpoint("POST", S + "/wait", "Wait (up to timeout seconds) for a turn to finish",
                 wait, s.Wait, s.TurnView),
        Endpoint("POST", S + "/keep", "Set the idle timeout (0: never)", keep, s.Keep,
                 s.SessionView),
        Endpoint("POST", S + "/suspend", "Checkpoint and release the sandbox", suspend,
                 response=s.SessionView),
        Endpoint("POST", S + "/archive", "Drop sandbox and checkpoints, keep the record",
                 archive, response=s.SessionView),
        Endpoint("POST", S + "/fork", "Restore one checkpoint into n new sessions", fork,
                 s.Fork, s.SessionView, many=True, status=201),
        Endpoint("POST", S + "/exec", "Run a command in the session's repo; NDJSON stream of "
                 '{"stdout"|"stderr": base64} lines, then {"exit": code}', exec_, s.Exec,
                 media="application/x-ndjson"),
        Endpoint("DELETE", S, "Delete the session and everything it stored", delete, status=204),
        Endpoint("GET", S + "/patch", "Base to working tree, untracked files included", patch,
                 media="text/x-diff"),
        Endpoint("GET", S + "/log", "A turn's run log (?turn=N, default the latest)", log,
                 media="text/plain"),
        Endpoint("GET", "/api/envs", "List environments (never secret values)", list_envs,
                 response=s.EnvironmentView, many=True),
        Endpoint("POST", "/api/envs", "Add an environment (its repo must be reachable)",
                 create_env, s.NewEnvironment, s.EnvironmentView, status=201),
        Endpoint("DELETE", "/api/envs/{name}", "Delete an environment", delete_env, status=204),
        Endpoint("GET", "/api/sandboxes", "List live sandboxes", list_sandboxes,
                 response=s.SandboxView, many=True),
        Endpoint("DELETE", "/api/sandboxes/{id}", "Destroy a sandbox (its session is "
                 "checkpointed first and suspended)", destroy_sandbox, status=204),
    ]  # fmt: skip

    from hangar.api.openapi import document
    from hangar.api.terminal import terminal_route

    spec = document(endpoints)

    async def openapi(request: Request) -> Response:
        return JSONResponse(spec)

    routes: list[Route | WebSocketRoute] = [
        Route("/api/openapi.json", openapi, methods=["GET"])
    ]
    for e in endpoints:
        routes.append(Route(e.path, guarded(e.handler), methods=[e.method]))
    routes.append(terminal_route(runtime))
    return Starlette(routes=routes)
