"""The MCP endpoint at ``/mcp``: hangar's sessions as MCP tools and artifacts as resources,
over the same session service as REST (spec 000 §5.6, spec 004).

Streamable HTTP, stateless, answering with SSE so that ``wait_for_turn``'s progress
notifications reach the caller before its result. The bearer token is checked exactly as REST
checks it. Importing the SDK is slow (most of a second), so :mod:`.endpoint` builds the server
(:mod:`.server`, tools in :mod:`.tools`) and starts its session manager on the first ``/mcp``
request only; nothing else in hangar imports the SDK.
"""
