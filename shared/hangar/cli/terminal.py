"""``hangar session shell NAME [--agent]``: an interactive terminal over the API's websocket.

It asks for a ticket first (``POST .../terminal-ticket``, with the bearer token), then opens
the websocket with ``?ticket=`` (the token never goes in the URL) and ``mode=shell`` or, with
``--agent``, ``mode=agent`` (the session's harness resuming its conversation). The local
terminal goes into raw mode (restored on the way out), keystrokes go up as binary frames and
output comes down the same way; the exit status is the program's, from the close reason
(``exit N``). When the local terminal changes size (SIGWINCH), the new size goes up as a
control message, so the program redraws to fit. When standard input ends (a pipe or a file; a terminal in raw mode never does),
the server is told with an empty frame and types the terminal's end-of-file key (Ctrl-D),
and the output is read until it ends: ``echo make | hangar session shell NAME`` shows all
that ``make`` prints, then the shell ends.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import termios
import threading
import tty
from urllib.parse import urlencode

from hangar.cli.client import ApiError, Client, session_path


def terminal(api: Client, name: str, mode: str = "shell") -> int:
    """Open session ``name``'s terminal (``mode`` shell or agent) on this one; its exit
    status. ApiError when the server refuses it or cannot be reached."""
    from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException
    from websockets.sync.client import connect

    fd_in, fd_out = sys.stdin.fileno(), sys.stdout.fileno()
    query = {"mode": mode, "term": os.environ.get("TERM") or "xterm-256color"}
    if (size := _size(fd_out)) is not None:
        query.update(rows=str(size[0]), cols=str(size[1]))
    where = api.url.replace("http", "ws", 1) + session_path(name, "terminal")
    ticket = api.call("POST", session_path(name, "terminal-ticket"), {"mode": mode})
    query["ticket"] = ticket["ticket"]  # asked with the mode: what keeps it closed is said now
    try:
        ws = connect(where + "?" + urlencode(query), open_timeout=600)
    except InvalidStatus as exc:
        raise _refused(exc.response.status_code, bytes(exc.response.body or b"")) from None
    except (OSError, WebSocketException) as exc:
        raise ApiError("unreachable", f"cannot open a terminal at {where}: {exc}") from None
    saved = termios.tcgetattr(fd_in) if os.isatty(fd_in) else None
    done = threading.Event()
    resized = threading.Event()  # set by SIGWINCH; the keys thread sends the new size

    def keys() -> None:
        reading = True
        while not done.is_set():
            ready, _, _ = select.select([fd_in] if reading else [], [], [], 0.2)
            try:
                if resized.is_set():
                    resized.clear()
                    if (size := _size(fd_out)) is not None:
                        ws.send(json.dumps({"type": "resize", "rows": size[0], "cols": size[1]}))
                if not ready:
                    continue
                data = os.read(fd_in, 4096)
                if not data:  # end of input: an empty frame says so, and the output comes
                    ws.send(b"")  # on until the program ends (bash -i ends on it)
                    reading = False
                else:
                    ws.send(data)
            except ConnectionClosed:
                return

    # SIGWINCH: the window changed size (a handler can only be set from the main thread)
    watching = os.isatty(fd_out) and threading.current_thread() is threading.main_thread()
    if watching:
        previous = signal.signal(signal.SIGWINCH, lambda *_: resized.set())
    with ws:
        try:
            if saved is not None:
                tty.setraw(fd_in)
            threading.Thread(target=keys, name="hangar-keys", daemon=True).start()
            for message in ws:
                os.write(fd_out, message if isinstance(message, bytes) else message.encode())
        except ConnectionClosed:
            pass
        finally:
            done.set()
            if watching:
                signal.signal(signal.SIGWINCH, previous or signal.SIG_DFL)
            if saved is not None:
                termios.tcsetattr(fd_in, termios.TCSADRAIN, saved)
    reason = (ws.close_reason or "").strip()
    if reason.startswith("exit ") and reason[5:].lstrip("-").isdigit():
        return int(reason[5:])
    code, _, message = reason.partition(": ")
    raise ApiError(code or "closed", message or "the terminal closed without an exit status")


def _size(fd: int) -> tuple[int, int] | None:
    """The terminal's rows and columns (the server takes more than 1,000 as 1,000); None when
    ``fd`` is no terminal or has no size (0 by 0, as some containers' are)."""
    try:
        size = os.get_terminal_size(fd)
    except OSError:
        return None
    if size.lines <= 0 or size.columns <= 0:
        return None
    return size.lines, size.columns


def _refused(status: int, body: bytes) -> ApiError:
    try:
        error = json.loads(body)["error"]
        code, message = str(error["code"]), str(error["message"])
    except (ValueError, KeyError, TypeError):
        code, message = "http_error", f"HTTP {status}"
    return ApiError(code, message, status)

