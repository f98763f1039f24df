"""The REST API under ``/api``: a thin surface over the session service, beside MCP
(:mod:`hangar.mcp`); what both stand on is in :mod:`hangar.operations`.

This package imports nothing heavy; the server (:mod:`hangar.server`) serves its routes."""
