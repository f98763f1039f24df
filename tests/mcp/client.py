"""The MCP SDK's own client over streamable HTTP, driven from synchronous tests: each call
opens a connection with the bearer token, makes one request and answers what came back,
progress notifications included."""

from __future__ import annotations

import base64
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio

T = TypeVar("T")


@dataclass
class Called:
    """One tool call's answer: its JSON (structuredContent, or an error's body), whether it is
    an error, its text (the first block parsed; an error's line), and the progress messages
    that arrived before it."""

    body: dict[str, Any]
    is_error: bool
    text: Any
    progress: list[tuple[float, str | None]] = field(default_factory=list)


class Mcp:
    def __init__(self, url: str, token: str | None) -> None:
        self.url = url.rstrip("/") + "/mcp"
        self.token = token

    def _run(self, work: Callable[[Any], Awaitable[T]]) -> T:
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}

        async def main() -> T:
            async with create_mcp_http_client(headers=headers) as http:
                async with Client(streamable_http_client(self.url, http_client=http)) as client:
                    return await work(client)

        return anyio.run(main)

    def call(self, tool: str, **args: Any) -> Called:
        seen: list[tuple[float, str | None]] = []

        async def work(client: Any) -> Called:
            async def progress(value: float, total: float | None, message: str | None) -> None:
                seen.append((value, message))

            result = await client.call_tool(tool, args, progress_callback=progress)
            if result.is_error:  # a line a person reads, then the error body as JSON
                assert result.structured_content is None, "an error has no structuredContent"
                line, body = result.content[0].text, json.loads(result.content[1].text)
                assert line == f"{body['error']['message']} ({body['error']['code']})", line
                return Called(body, True, line, seen)
            text = json.loads(result.content[0].text) if result.content else None
            return Called(result.structured_content or {}, bool(result.is_error), text, seen)

        return self._run(work)

    def ok(self, tool: str, **args: Any) -> dict[str, Any]:
        called = self.call(tool, **args)
        assert not called.is_error, called.body
        assert called.text == called.body  # the same JSON as text
        return called.body

    def tools(self) -> dict[str, Any]:
        async def work(client: Any) -> dict[str, Any]:
            return {t.name: t for t in (await client.list_tools()).tools}

        return self._run(work)

    def resources(self) -> list[str]:
        async def work(client: Any) -> list[str]:
            return [str(r.uri) for r in (await client.list_resources()).resources]

        return self._run(work)

    def read(self, uri: str) -> bytes:
        async def work(client: Any) -> bytes:
            content = (await client.read_resource(uri)).contents[0]
            if hasattr(content, "text"):
                return str(content.text).encode()
            return base64.b64decode(content.blob)

        return self._run(work)
