"""What the REST API (:mod:`hangar.api`) and the MCP endpoint (:mod:`hangar.mcp`) both stand on,
written once: who may call (:mod:`.auth`), what a request may carry (:mod:`.limits`) and the wire
models, requests and the views a session is shown as (:mod:`.wire`).

Neither surface imports the other; each adapts what is here to its own protocol. This package
imports nothing heavy.
"""
