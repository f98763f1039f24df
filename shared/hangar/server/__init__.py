"""The HTTP server: ``hangar serve`` (:mod:`.serve`), which serves REST under ``/api``, MCP at
``/mcp``, the dashboard and, when asked, ``POST /ticks``.

This package stands above both surfaces: it is where they meet. It imports nothing heavy.
"""
