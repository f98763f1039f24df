"""The stand-in's ``http.server`` exec front and a client slow to answer its close: the
connection is cut, and nothing of the exec is left reading or writing the request's closed
files (a thread failing on one is an error here, not a warning)."""

from __future__ import annotations

import base64
import contextlib
import os
import socket
import threading
from typing import Any

import pytest
from websockets.frames import Close, Frame, Opcode

from emulators.kube import exec as kube_exec
from hangar.sandboxes.local import LocalSandboxes
from tests.emulators.test_kube_exec import WAIT, Pod

pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")

CUT = 10.0
"""The bound on the wait for the server to cut a silent client off (it does after CLOSE_WAIT)."""
CLOSED = Frame(Opcode.CLOSE, Close(1000, "").serialize()).serialize(mask=False)
"""The server's close frame as it comes (unmasked)."""


def handshake(key: str) -> bytes:
    return (f"GET /api/v1/namespaces/ns/pods/pod/exec?command=true&stdout=true HTTP/1.1\r\n"
            f"Host: pod\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            f"Sec-WebSocket-Protocol: {kube_exec.V5}\r\n\r\n").encode()  # fmt: skip


def test_a_client_that_answers_the_close_late_finds_the_exec_done_with_its_connection(
    sandboxes: LocalSandboxes, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kube_exec, "CLOSE_WAIT", 0.1)  # the silent client is cut off soon
    readers: list[threading.Thread] = []
    read = kube_exec._read

    def recorded(*args: Any) -> None:
        readers.append(threading.current_thread())
        read(*args)

    monkeypatch.setattr(kube_exec, "_read", recorded)
    pod = Pod(sandboxes, "http.server")
    try:
        with socket.create_connection(pod.sock.getsockname(), timeout=WAIT) as client:
            client.sendall(handshake(base64.b64encode(os.urandom(16)).decode()))
            heard = b""
            while not heard.endswith(CLOSED) and (chunk := client.recv(1 << 16)):
                heard += chunk
            assert heard.split(b"\r\n", 1)[0].endswith(b" 101 Switching Protocols")
            assert b'"Success"' in heard and heard.endswith(CLOSED), heard
            client.settimeout(CUT)
            try:  # the client says nothing: the server cuts the connection
                cut = client.recv(1 << 16) == b""
            except TimeoutError:
                cut = False
            late = Frame(Opcode.CLOSE, Close(1000, "").serialize()).serialize(mask=True)
            with contextlib.suppress(OSError):  # the answer to the close, come late
                client.sendall(late)
            for reader in readers:
                reader.join(WAIT)
        assert cut, "the server did not cut off a client that left its close unanswered"
        assert len(readers) == 1 and not readers[0].is_alive()
    finally:
        pod.close()
