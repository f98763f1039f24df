"""hangar's MCP server: the tools of :mod:`.tools` with their own input and output schemas,
and each session's artifacts as resources ``hangar://sessions/<name>/artifacts/<turn>/<path>``.

Built on the SDK's ``MCPServer`` by overriding its four public entry points (``list_tools``,
``call_tool``, ``list_resources``, ``read_resource``), so the schemas published are exactly the
pydantic models that check the calls. ``resources/list`` lists the artifacts of the newest
:data:`LISTED_SESSIONS` sessions; any artifact's URI reads, whoever listed it.
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import mimetypes
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from mcp import UriTemplate
from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import DEFAULT_RESOURCE_SECURITY, Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError
from mcp_types import CallToolResult, Resource, ResourceTemplate, TextContent
from mcp_types import Tool as McpTool

from hangar import __version__
from hangar.operations.limits import checked
from hangar.errors import HangarError, NotFound
from hangar.exchange import is_text
from hangar.mcp.tools import TOOLS, Tool, error_body
from hangar.sessions.watching import Note

if TYPE_CHECKING:
    from hangar.runtime import Runtime

logger = logging.getLogger(__name__)

ARTIFACT = UriTemplate.parse("hangar://sessions/{name}/artifacts/{turn}/{+path}")
LISTED_SESSIONS = 50


def _result(body: dict[str, Any]) -> CallToolResult:
    """A tool's answer: its output as ``structuredContent`` (it matches the tool's
    ``outputSchema``) and as JSON text."""
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(body))],
                          structured_content=body)  # fmt: skip


def _error(exc: HangarError) -> CallToolResult:
    """A tool's error (``isError``): the message and its stable code as a line a person reads,
    then the REST API's error body as JSON text for programs. No ``structuredContent``: the
    tool's ``outputSchema`` describes its answers, and clients check what they get against
    it."""
    body = error_body(exc)
    line = TextContent(type="text", text=f"{exc.message} ({exc.code})")
    return CallToolResult(content=[line, TextContent(type="text", text=json.dumps(body))],
                          is_error=True)  # fmt: skip


class HangarMcp(MCPServer):
    """The server over one runtime (see the module doc)."""

    def __init__(self, runtime: Runtime) -> None:
        root = logging.getLogger()
        kept = (root.level, list(root.handlers))
        super().__init__("hangar", version=__version__, log_level="WARNING",
                         middleware=[ListedOnce()])  # fmt: skip
        root.setLevel(kept[0])  # the SDK configures the root logger; logging is hangar's
        root.handlers[:] = kept[1]
        self.runtime = runtime
        self.tools = {t.name: t for t in TOOLS}

    async def list_tools(self) -> list[McpTool]:
        return listed_tools()

    async def call_tool(self, name: str, arguments: dict[str, Any],
                        context: Context[Any, Any] | None = None) -> CallToolResult:  # fmt: skip
        tool = self.tools.get(name)
        if tool is None:
            return _error(NotFound(f"no tool {name!r}: tools/list names them", tool=name))
        try:
            args = _parse(tool, arguments)
            out = await tool.run(self.runtime, args, _reporter(context))
        except HangarError as exc:
            return _error(exc)
        except Exception:  # a tool's top level: log it, tell the caller nothing more
            logger.exception("MCP tool %s failed", name)
            return _error(HangarError("internal error; see the server's log"))
        return _result(out.model_dump(mode="json"))

    async def list_resources(self) -> list[Resource]:
        import anyio.to_thread

        def listed() -> list[Resource]:
            sessions, _ = self.runtime.sessions.page(LISTED_SESSIONS)
            found = []
            for session in sessions:
                for a in self.runtime.sessions.artifacts(session.id):
                    found.append(Resource(uri=a.uri, name=f"{session.name} turn {a.turn}: "
                                          f"{a.path}", size=a.size, mime_type=_mime(a.path)))  # fmt: skip
            return found

        return await anyio.to_thread.run_sync(listed)

    async def list_resource_templates(self) -> list[ResourceTemplate]:
        return [ResourceTemplate(uri_template=str(ARTIFACT), name="artifact",
                                 description="a file a session's turn handed back")]  # fmt: skip

    async def read_resource(self, uri: Any, context: Context[Any, Any] | None = None
                            ) -> Iterable[ReadResourceContents]:  # fmt: skip
        import anyio.to_thread

        params = ARTIFACT.match(str(uri))
        if (params is None or not str(params["turn"]).isdigit()
                or DEFAULT_RESOURCE_SECURITY.validate(params) is not None):  # fmt: skip
            raise ResourceNotFoundError(f"no resource {uri}")
        name, turn, path = str(params["name"]), int(str(params["turn"])), str(params["path"])
        try:
            data = await anyio.to_thread.run_sync(
                lambda: self.runtime.sessions.artifact(name, turn, path))
        except HangarError as exc:
            raise ResourceNotFoundError(f"no resource {uri}: {exc.message}") from None
        content: str | bytes = data.decode() if is_text(data) else data
        return [ReadResourceContents(content=content, mime_type=_mime(path))]


@functools.cache
def listed_tools() -> list[McpTool]:
    """Every tool with its input and output JSON Schema, built once per process (building
    them takes tens of milliseconds, and they never change while it runs)."""
    return [McpTool(name=t.name, description=t.description,
                    input_schema=t.input.model_json_schema(),
                    output_schema=t.output.model_json_schema()) for t in TOOLS]  # fmt: skip


class ListedOnce:
    """SDK middleware that keeps ``tools/list``'s answer as it goes on the wire, one per
    protocol version, and answers later calls without params from it.

    The tools never change while the process runs, but the SDK dumped the listed tools to a
    dict, validated that against the protocol version's result model and dumped it again on
    every call: two passes over some 80 KB of JSON Schema, about 9 of a warm call's 12 ms. The
    first call of each version goes the whole way (its answer is the SDK's own, stamps and
    sieve included); a call with params (a cursor, ``_meta``) always does, so what the SDK
    validates is still validated. hangar's server is stateless: every connection is ready
    without a handshake, so no call is answered from here that the SDK would refuse."""

    def __init__(self) -> None:
        self.answers: dict[str, dict[str, Any]] = {}

    async def __call__(self, ctx: ServerRequestContext[Any, Any],
                       call_next: CallNext) -> HandlerResult:  # fmt: skip
        if ctx.method != "tools/list" or ctx.params:
            return await call_next(ctx)
        kept = self.answers.get(ctx.protocol_version)
        if kept is None:
            answer = await call_next(ctx)
            if not isinstance(answer, dict):
                return answer
            kept = self.answers[ctx.protocol_version] = copy.deepcopy(answer)
        return dict(kept)  # the SDK copies a dict it is given, but never deeper: nor do we


def _parse(tool: Tool, arguments: dict[str, Any] | None) -> Any:
    return checked(tool.input, arguments or {}, what="arguments", whole="arguments")


def _reporter(context: Context[Any, Any] | None) -> Any:
    count = 0

    async def report(note: Note) -> None:
        nonlocal count
        count += 1
        if context is not None:
            text = f"[{note.pct:g}%] {note.message}" if note.pct is not None else note.message
            await context.report_progress(count, None, text)

    return report


def _mime(path: str) -> str:
    return mimetypes.guess_type(path)[0] or "application/octet-stream"
