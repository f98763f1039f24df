"""The connections a real ``hangar serve`` accepts, seen from the server's side.

The server runs in a subprocess as the ``server`` fixture runs it, with one hook added before
``main``: uvicorn's HTTP protocol is wrapped so that each connection it is handed prints what
its socket's TCP_NODELAY is, and whom it is from. Without TCP_NODELAY every response written in
two pieces on a kept-alive connection waits for the client's delayed ACK (about 40 ms)."""

from __future__ import annotations

import http.client
import os
import queue
import select
import subprocess
import sys
import threading
from pathlib import Path

from tests.cli.conftest import START_SECONDS, Server

HOOK = """
import socket, sys
import uvicorn
from hangar.cli import main

load = uvicorn.Config.load

def load_watched(self):
    load(self)
    base = self.http_protocol_class

    class Watched(base):
        def connection_made(self, transport):
            sock = transport.get_extra_info("socket")
            nodelay = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            port = sock.getpeername()[1]
            print(f"accepted peer={port} nodelay={nodelay}", file=sys.stderr, flush=True)
            super().connection_made(transport)

    self.http_protocol_class = Watched

uvicorn.Config.load = load_watched
sys.exit(main())
"""


def _start(tmp_path: Path, *flags: str) -> Server:
    """``hangar serve --port 0`` with the hook (and the interpreter's ``flags``), once it says
    where it serves."""
    data_dir, harnesses = tmp_path / "data", tmp_path / "harnesses"
    harnesses.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANGAR_")}
    env.update(HANGAR_DATA_DIR=str(data_dir), HANGAR_HARNESS_DIR=str(harnesses))
    proc = subprocess.Popen(
        [sys.executable, *flags, "-c", HOOK, "serve", "--port", "0"], env=env,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    lines: queue.Queue[bytes | None] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    server = Server("", data_dir, proc, lines)
    try:
        while not server.url:
            line = lines.get(timeout=START_SECONDS)
            assert line is not None, b"".join(server.output).decode()
            server.output.append(line)
            if b"serving http://" in line:
                server.url = line.split(b"serving ", 1)[1].split()[0].decode()
    except BaseException:
        server.stop()
        raise
    return server


def test_every_accepted_connection_has_tcp_nodelay(tmp_path: Path) -> None:
    server = _start(tmp_path)
    try:
        host, port = server.url.removeprefix("http://").rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=START_SECONDS)
        try:
            for _ in range(2):  # two requests on one kept-alive connection
                conn.request("GET", "/api/no-such-route")
                response = conn.getresponse()
                response.read()
                assert response.status == 404
            mine = conn.sock.getsockname()[1]
        finally:
            conn.close()
        wanted = f"accepted peer={mine} ".encode()
        said: list[bytes] = []
        while not any(line.startswith(wanted) for line in said):
            line = server.lines.get(timeout=START_SECONDS)
            assert line is not None, b"".join(server.output + said).decode()
            said.append(line)
        nodelay = said[-1].decode().split()[-1]
        assert nodelay.startswith("nodelay="), said[-1]
        assert nodelay != "nodelay=0", "the accepted socket has no TCP_NODELAY"
    finally:
        server.stop()


def test_the_mcp_server_is_built_at_start_before_any_request(tmp_path: Path) -> None:
    # -X importtime prints each module as it is imported: hangar.mcp.server comes without a
    # single request (a first /mcp call that built it took about a second, and Claude Code -p
    # and Codex start a turn without the tools of a server that slow to answer).
    server = _start(tmp_path, "-X", "importtime")
    try:
        while not any(b"| hangar.mcp.server" in line for line in server.output):
            line = server.lines.get(timeout=START_SECONDS)
            assert line is not None, b"".join(server.output).decode()[-3000:]
            server.output.append(line)
    finally:
        server.stop()


def test_an_idle_kept_alive_connection_outlives_what_clients_keep_theirs(tmp_path: Path) -> None:
    # Node's fetch keeps an idle connection 4 s and httpx 5 s: a server that closes its end at
    # 5 s races a client sending on it (MCP clients saw "other side closed" under load).
    server = _start(tmp_path)
    try:
        host, port = server.url.removeprefix("http://").rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=START_SECONDS)
        try:
            conn.request("GET", "/api/no-such-route")
            conn.getresponse().read()
            assert conn.sock is not None
            # The server's close would make the socket readable (EOF): wait 7 s for it.
            closed, _, _ = select.select([conn.sock], [], [], 7.0)
            assert not closed, "the server closed an idle kept-alive connection within 7 s"
            conn.request("GET", "/api/no-such-route")
            assert conn.getresponse().status == 404
        finally:
            conn.close()
    finally:
        server.stop()
