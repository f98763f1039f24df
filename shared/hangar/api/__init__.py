"""The REST API (and, later, the MCP endpoint): thin surfaces over the session service.

Import :func:`create_app` from :mod:`hangar.api.app`; this package imports nothing heavy."""
