"""``tools/list`` answered from the SDK's own bytes once the SDK has answered it twice alike
(:mod:`hangar.mcp.replay`): in-process, through the app, counting what reaches the SDK."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.types import Message, Receive, Scope, Send

from hangar.config import Settings
from hangar.mcp.replay import Replay
from hangar.runtime import Runtime
from tests.api.conftest import signed_in

HEADERS = {"Accept": "application/json, text/event-stream"}


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The JSON-RPC methods of the requests the SDK's session manager handled."""
    seen: list[str] = []
    handle = StreamableHTTPSessionManager.handle_request

    async def counted(self: Any, scope: Scope, receive: Receive, send: Send) -> None:
        first = await receive()
        seen.append(json.loads(first.get("body") or b"{}").get("method", ""))
        handed = False

        async def again() -> Message:
            nonlocal handed
            if not handed:
                handed = True
                return first
            return await receive()

        await handle(self, scope, again, send)

    monkeypatch.setattr(StreamableHTTPSessionManager, "handle_request", counted)
    return seen


@pytest.fixture
def app_runtime(tmp_path: Path) -> Iterator[Runtime]:
    settings = Settings.build(data_dir=tmp_path / "data", harness_dir=tmp_path / "harnesses")
    runtime = Runtime(settings)
    yield runtime
    runtime.close()


def listing(rid: object) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/list", "params": {}}


def test_a_repeated_tools_list_gets_the_sdks_own_bytes_with_its_own_id(
    app_runtime: Runtime, calls: list[str]
) -> None:
    with signed_in(app_runtime) as client:
        answers = [client.post("/mcp", json=listing(rid), headers=HEADERS)
                   for rid in (1, 2, 3, 40, "abc")]  # fmt: skip
        assert calls == ["tools/list", "tools/list"]  # the last three never reached the SDK
        first = answers[0]
        assert first.status_code == 200 and first.content.startswith(b"event: message")
        for rid, answer in zip((2, 3, 40, "abc"), answers[1:], strict=True):
            assert answer.status_code == 200
            assert answer.headers == first.headers
            assert answer.content == first.content.replace(b'"id":1,', b'"id":%s,' % json.dumps(
                rid).encode(), 1)  # fmt: skip
        data = json.loads(answers[-1].content.split(b"data: ", 1)[1])
        assert data["id"] == "abc" and len(data["result"]["tools"]) >= 15


def test_a_tools_list_of_another_shape_or_another_method_goes_to_the_sdk(
    app_runtime: Runtime, calls: list[str]
) -> None:
    with signed_in(app_runtime) as client:
        for rid in (1, 2, 3):
            assert client.post("/mcp", json=listing(rid), headers=HEADERS).status_code == 200
        assert len(calls) == 2
        versioned = {**HEADERS, "MCP-Protocol-Version": "2025-06-18"}
        client.post("/mcp", json=listing(4), headers=versioned)
        client.post("/mcp", json={**listing(5), "params": {"cursor": "x"}}, headers=HEADERS)
        client.post("/mcp", json={**listing(6), "id": True}, headers=HEADERS)
        ping = client.post("/mcp", json={"jsonrpc": "2.0", "id": 7, "method": "ping"},
                           headers=HEADERS)  # fmt: skip
        assert ping.status_code == 200
        assert calls == ["tools/list"] * 5 + ["ping"]


def test_an_answer_that_differs_from_one_call_to_the_next_is_never_replayed() -> None:
    asyncio.run(_differing())


async def _differing() -> None:
    replay, served = Replay(), []

    async def sdk(scope: Scope, receive: Receive, send: Send) -> None:
        request = json.loads((await receive())["body"])
        served.append(request["id"])
        body = b'data: {"id":%d,"result":{"n":%d}}\n\n' % (request["id"], len(served))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})

    for rid in range(1, 6):
        raw = json.dumps(listing(rid)).encode()
        scope = {"type": "http", "headers": [(b"content-length", str(len(raw)).encode())]}
        sent: list[Message] = []
        delivered = False

        async def receive() -> Message:
            nonlocal delivered
            delivered = True
            return {"type": "http.request", "body": raw, "more_body": False}

        async def send(message: Message) -> None:
            sent.append(message)

        await replay(scope, receive, send, sdk)
        assert delivered and sent[-1]["body"].endswith(b'"n":%d}}\n\n' % rid)
    assert served == [1, 2, 3, 4, 5]


def test_a_replayed_answer_with_a_length_counts_its_own_id() -> None:
    asyncio.run(_with_length())


async def _with_length() -> None:
    replay, served = Replay(), []

    async def sdk(scope: Scope, receive: Receive, send: Send) -> None:
        request = json.loads((await receive())["body"])
        served.append(request["id"])
        body = b'{"jsonrpc":"2.0","id":%s,"result":{}}' % json.dumps(request["id"]).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(len(body)).encode())]})  # fmt: skip
        await send({"type": "http.response.body", "body": body})

    for rid in (1, 2, 123456789):
        raw = json.dumps(listing(rid)).encode()
        sent: list[Message] = []

        async def receive() -> Message:
            return {"type": "http.request", "body": raw, "more_body": False}

        async def send(message: Message) -> None:
            sent.append(message)

        scope = {"type": "http", "headers": [(b"content-length", str(len(raw)).encode())]}
        await replay(scope, receive, send, sdk)
        assert sent[-1]["body"] == b'{"jsonrpc":"2.0","id":%d,"result":{}}' % rid
        assert dict(sent[0]["headers"])[b"content-length"] == str(len(sent[-1]["body"])).encode()
    assert served == [1, 2]
