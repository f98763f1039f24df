"""``hangar serve``: the control plane on one machine, on the embedded backends or the cloud ones.

At start it brings records of an older hangar up to date (:mod:`hangar.db.migrations`),
takes over the claims a previous process left, and checkpoints and destroys every sandbox made by an older layout of the sandbox
backend (their sessions become SUSPENDED and resume in a current one). First of all it makes
the data folder private, tightening one left open (:func:`hangar.private.tighten`: the folder
0700, hangar's files in it 0600, each change said). On first start it makes
an admin token, writes it to ``DATA_DIR/admin-token`` (mode 0600) and
says where it is (never what it is). It starts the in-process ticker, so turns finish, idle
sessions suspend and expired sandboxes are reaped with nobody calling in, and serves the REST
API with uvicorn until SIGINT or SIGTERM, then stops cleanly (open requests get a few seconds to
finish, the ticker stops, the database closes) and returns 0.

With Cloud Tasks ticks (``HANGAR_TICKS=cloudtasks://...``) and no ``HANGAR_TICKS_URL``, the
server has the tasks posted to its own ``POST /ticks``; with a ticks URL they go there (a ticks
function) and this server only schedules them.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
from pathlib import Path
from types import FrameType
from urllib.parse import urlsplit

from hangar.operations.auth import TOKEN_FILE, ensure_admin_token
from hangar.api.ticks import PATH as TICKS_PATH
from hangar.config import Settings
from hangar.errors import InvalidSettings
from hangar.private import tighten
from hangar.db.migrations import migrate

GRACE_SECONDS = 5
KEEP_ALIVE_SECONDS = 65
"""How long an idle kept-alive connection stays open: longer than clients keep theirs (Node's
fetch 4 s, httpx 5 s), so a client never sends on a connection the server is closing that very
moment (uvicorn's default, 5 s, is just past Node's: under load MCP clients saw "other side
closed")."""


def _say(text: str) -> None:
    print(f"hangar: {text}", file=sys.stderr, flush=True)


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: any free port); InvalidSettings if the
    address cannot be used.

    Every connection it accepts has TCP_NODELAY set. The socket is made with its protocol named
    (``IPPROTO_TCP``), which is what asyncio's transports look for before they set TCP_NODELAY
    on an accepted socket (uvloop sets it always); ``socket.create_server`` makes it with
    protocol 0 and then no connection gets it, so each response written in two pieces (uvicorn
    writes the head, then the body) waited for the client's delayed ACK, about 40 ms on Linux,
    on a kept-alive connection. Otherwise as ``socket.create_server``: SO_REUSEADDR (not on
    Windows), an IPv6 address serves IPv6 only, a backlog of 128."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        try:
            if os.name not in ("nt", "cygwin"):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind((host, port))
            sock.listen(128)
        except BaseException:
            sock.close()
            raise
        return sock
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise InvalidSettings(f"cannot listen on {host}:{port}: {reason}",
                              host=host, port=port) from None  # fmt: skip


def serve(settings: Settings, host: str, port: int) -> int:
    import uvicorn

    from hangar.server.app import create_app
    from hangar.runtime import Runtime

    sock = listen(host, port)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")  # fmt: skip
    try:
        for change in tighten(settings.data_dir):  # 0700, and hangar's files in it 0600
            _say(change)
    except OSError as exc:
        raise InvalidSettings(f"cannot make the data folder {settings.data_dir}: "
                              f"{exc.strerror}", setting="HANGAR_DATA_DIR") from None  # fmt: skip
    bound_host, bound_port = sock.getsockname()[:2]
    receive_ticks = settings.ticks.startswith("cloudtasks:") and not settings.ticks_url
    if receive_ticks:
        settings = settings.replace(ticks_url=_self_url(bound_host, bound_port) + TICKS_PATH)
        _say(f"Cloud Tasks will post ticks to {settings.ticks_url}")
    runtime = Runtime(settings)
    try:
        token_file = settings.data_dir / TOKEN_FILE
        if ensure_admin_token(runtime.db, token_file):
            _say(f"made an admin token; it is in {token_file} (mode 0600)")
        else:
            _say(f"the admin token is in {token_file}")
        migrate(runtime.db)
        runtime.sessions.recover()
        runtime.sessions.prebuild()
        replaced = runtime.sessions.replace_outdated_sandboxes()
        if replaced:
            _say(f"checkpointed and replaced {len(replaced)} sandbox(es) of an older, weaker "
                 "layout; their sessions resume in new ones")  # fmt: skip
        app = create_app(runtime, receive_ticks=receive_ticks)
        config = uvicorn.Config(app, log_level="warning", lifespan="off",
                                timeout_graceful_shutdown=GRACE_SECONDS,
                                timeout_keep_alive=KEEP_ALIVE_SECONDS)  # fmt: skip
        server = uvicorn.Server(config)
        runtime.start()
        threading.Thread(target=warm_mcp, name="mcp-warm", daemon=True).start()
        _say(banner(bound_host, bound_port, settings.data_dir))
        # uvicorn stops on SIGINT/SIGTERM and then raises the signal again under the handler
        # it found: with these no-op handlers that ends run() instead of the process, so the
        # runtime below is closed.
        previous = {sig: signal.signal(sig, _ignore) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            server.run(sockets=[sock])
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    finally:
        runtime.close()
        sock.close()
    _say("stopped")
    return 0


def warm_mcp() -> None:
    """Import the MCP SDK and build the tools' schemas while the server starts taking requests,
    so that a client's first ``/mcp`` call finds them ready: Claude Code with ``-p`` and Codex
    start a turn without a server's tools when its first answer is slow, and building them on
    that call took about a second. (The api function stays lazy: its cold start serves REST
    too.)"""
    from hangar.mcp.server import listed_tools

    listed_tools()


def banner(host: str, port: int, data_dir: Path) -> str:
    """The line said once the server is up. It starts ``serving URL``, the base URL the CLI
    takes in ``HANGAR_URL`` and a browser opens (the REST API is under its ``/api``; a
    wildcard bind is shown as loopback, which reaches it)."""
    url = _self_url(host, port)
    bound = f"[{host}]" if ":" in host else host
    where = f", bound to {bound}:{port}" if urlsplit(url).hostname != host else ""
    return (f"serving {url} (the CLI's HANGAR_URL; the dashboard at /, the REST API under "
            f"/api{where}; data in {data_dir})")


def _self_url(host: str, port: int) -> str:
    """How this server reaches itself: a wildcard bind is reached on loopback."""
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _ignore(signum: int, frame: FrameType | None) -> None:
    pass
