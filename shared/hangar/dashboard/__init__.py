"""The dashboard: a web page over the REST API, served by the same app at ``/``.

The page is static: ``static/index.html`` with ``app.js`` (ES modules, no framework) and the
terminal's library, xterm.js, built from pinned npm packages into ``static/vendor`` by ``make
assets`` (never fetched from anywhere at run time, never committed). Everything it shows and
does goes through the REST API with the token the person signs in with, kept in the browser's
``sessionStorage`` and sent as the bearer header; the terminal's websocket takes a single-use
ticket instead (``POST /api/sessions/{ref}/terminal-ticket``), so the token is never in a URL.

The pages are ``/`` (the Sessions list), ``/new`` (New session), ``/environments`` and
``/sessions/{name}`` (:data:`PAGES`); ``/favicon.ico`` answers ``static/favicon.ico``, which
browsers ask for whatever the page links (it links that and ``static/favicon.svg``).

Every page and asset is served with :data:`POLICY` as its Content-Security-Policy: scripts,
styles, fonts and connections from this origin only, inline styles allowed (xterm.js sets
element styles and writes a style sheet of its own), no inline script, no frames, no plugins.
"""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

STATIC = Path(__file__).with_name("static")

POLICY = "; ".join([
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data:",
    "font-src 'self'",
    "connect-src 'self'",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
])  # fmt: skip
"""The dashboard's Content-Security-Policy."""

HEADERS = {
    "Content-Security-Policy": POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
"""Sent with every page and asset (``no-cache``: revalidated by ETag, so an upgrade shows)."""

PAGES = ("/", "/new", "/environments", "/sessions/{name}")
"""The page's addresses: each serves ``index.html``, whose script reads the path."""


class _Secured:
    """An ASGI wrapper adding :data:`HEADERS` to every response of the wrapped app."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_secured(message: dict[str, object]) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers") or [])  # type: ignore[call-overload]
                headers += [(k.lower().encode(), v.encode()) for k, v in HEADERS.items()]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_secured)  # type: ignore[arg-type]


async def _page(request: Request) -> Response:
    return FileResponse(STATIC / "index.html", media_type="text/html", headers=HEADERS)


async def _favicon(request: Request) -> Response:
    return FileResponse(STATIC / "favicon.ico", media_type="image/x-icon", headers=HEADERS)


def routes() -> list[BaseRoute]:
    """The page's routes: the pages (:data:`PAGES`), ``/favicon.ico`` and ``/static``."""
    pages: list[BaseRoute] = [Route(path, _page, methods=["GET", "HEAD"]) for path in PAGES]
    icon = Route("/favicon.ico", _favicon, methods=["GET", "HEAD"])
    static = StaticFiles(directory=STATIC, check_dir=False)
    return [*pages, icon, Mount("/static", app=_Secured(static), name="static")]
