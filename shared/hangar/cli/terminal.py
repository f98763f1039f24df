"""``hangar session shell NAME``: an interactive terminal over the API's websocket."""

from __future__ import annotations

import os
import select
import sys
import termios
import threading
import tty

from hangar.cli.client import ApiError, Client


def terminal(api: Client, name: str) -> int:
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    url = api.url.replace("http", "ws", 1) + f"/api/sessions/{name}/terminal"
    headers = {"Authorization": f"Bearer {api.token}"} if api.token else {}
    try:
        ws = connect(url, additional_headers=headers)
    except (OSError, ConnectionClosed) as exc:
        raise ApiError("unreachable", f"cannot open a terminal at {url}: {exc}") from None
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd) if os.isatty(fd) else None
    done = threading.Event()

    def pump_keys() -> None:
        while not done.is_set():
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                data = os.read(fd, 4096)
                if not data:
                    break
                try:
                    ws.send(data)
                except ConnectionClosed:
                    break

    try:
        if saved is not None:
            tty.setraw(fd)
        threading.Thread(target=pump_keys, daemon=True).start()
        try:
            for message in ws:
                out = message if isinstance(message, bytes) else message.encode()
                os.write(sys.stdout.fileno(), out)
        except ConnectionClosed:
            pass
    finally:
        done.set()
        if saved is not None:
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)
    reason = ws.close_reason or ""
    if reason.startswith("exit "):
        return int(reason[5:] or 1)
    if reason:
        print(f"\nhangar: {reason}", file=sys.stderr)
    return 1
