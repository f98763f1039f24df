"""``hangar session shell NAME [--agent]``, the terminal over the websocket, run as a person
would (its own process, standard input a pipe) against a real ``hangar serve``."""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import signal
import struct
import subprocess
import termios
import time
from pathlib import Path

from tests.cli.conftest import Cli, Server, _serve_command
from tests.conftest import GIT_IDENTITY


def hangar(*argv: str, keys: bytes, end: bool = False) -> tuple[int, bytes, bytes]:
    """The CLI in a process of its own (the terminal reads and writes its file descriptors),
    typed ``keys`` and left to end by itself: input stays open, as a person's would, unless
    ``end`` (then it ends after the keys, as a pipe's does)."""
    proc = subprocess.Popen([*_serve_command(), *argv], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ))  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    try:
        proc.stdin.write(keys)
        proc.stdin.flush()
        if end:
            proc.stdin.close()
        try:
            code = proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError(f"the terminal did not end; it showed {proc.stdout.read()!r}, "
                                 f"and said {proc.stderr.read()!r}") from None  # fmt: skip
        return code, proc.stdout.read(), proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            pipe.close()


def test_the_terminal_opens_with_a_ticket_as_a_shell_or_as_the_agent(
    server: Server, cli: Cli, remote: Path
) -> None:
    variables = [arg for k, v in GIT_IDENTITY.items() for arg in ("--var", f"{k}={v}")]
    assert cli("env", "add", "app", "--repo", str(remote), *variables)[0] == 0
    code, _, err = cli("session", "new", "demo", "hi", "--env", "app", "--harness",
                       "antigravity", "-w")  # fmt: skip
    assert code == 0, err

    status, screen, errors = hangar("session", "shell", "demo",
                                    keys=b"echo marker-$((6*7)); exit 4\n")  # fmt: skip
    assert status == 4, errors
    assert b"marker-42" in screen
    # input that ends (a pipe): what it typed runs to its end, then the shell ends as on Ctrl-D
    status, screen, errors = hangar("session", "shell", "demo", end=True,
                                    keys=b"true; echo piped-$((6*7)); (exit 3)\n")  # fmt: skip
    assert status == 3, (errors, screen)
    assert b"piped-42" in screen

    conversation = json.loads(cli("session", "get", "demo", "--json")[1])["harness_session"]
    for argv in (("session", "shell", "demo", "--agent"), ("session", "shell", "--agent", "demo")):
        status, screen, errors = hangar(*argv, keys=b"/exit\n")
        assert status == 0, errors
        found = re.search(rb"agy interactive argv=(\[.*?\])", screen)
        assert found and json.loads(found.group(1)) == ["--conversation", conversation]

    code, _, err = cli("session", "shell", "--agent", "demo", "--", "ls")
    assert code == 2 and "takes no CMD" in err


class OnATerminal:
    """The CLI in a process of its own on a pseudo terminal of ours, as in a person's window:
    its size set with :meth:`resize` (as a window's is, SIGWINCH included)."""

    def __init__(self, *argv: str, rows: int, cols: int) -> None:
        self.master, slave = os.openpty()
        self._size(slave, rows, cols)
        self.proc = subprocess.Popen([*_serve_command(), *argv], stdin=slave, stdout=slave,
                                     stderr=slave, env=dict(os.environ))  # fmt: skip
        self.slave, self.seen = slave, b""

    def _size(self, fd: int, rows: int, cols: int) -> None:
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def resize(self, rows: int, cols: int) -> None:
        self._size(self.slave, rows, cols)
        self.proc.send_signal(signal.SIGWINCH)

    def type(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def until(self, pattern: bytes, limit: float = 120) -> re.Match[bytes]:
        """Read the screen until ``pattern`` shows (a bounded wait)."""
        deadline = time.monotonic() + limit
        while not (found := re.search(pattern, self.seen)):
            left = deadline - time.monotonic()
            assert left > 0, f"{pattern!r} never showed; the screen: {self.seen[-2000:]!r}"
            if select.select([self.master], [], [], min(left, 1.0))[0]:
                self.seen += os.read(self.master, 65536)
        return found

    def close(self) -> int:
        self.type(b"exit\n")
        try:
            return self.proc.wait(timeout=60)
        finally:
            self.proc.kill()
            self.proc.wait()
            os.close(self.master)
            os.close(self.slave)


def test_the_terminal_follows_the_windows_size(server: Server, cli: Cli, remote: Path) -> None:
    assert cli("env", "add", "app", "--repo", str(remote))[0] == 0
    code, _, err = cli("session", "new", "sized", "hi", "--env", "app", "--harness",
                       "antigravity", "-w")  # fmt: skip
    assert code == 0, err
    window = OnATerminal("session", "shell", "sized", rows=30, cols=100)
    try:
        window.until(rb"\$ ")
        window.type(b"echo size1=$(stty size)\n")
        window.until(rb"size1=30 100")
        window.resize(45, 132)
        asked = 2
        while not re.search(rb"size\d+=45 132", window.seen):  # the resize is on its way
            assert asked < 40, window.seen[-2000:]
            window.type(f"echo size{asked}=$(stty size)\n".encode())
            window.until(rf"size{asked}=\d+ \d+".encode())
            asked += 1
    finally:
        assert window.close() == 0
