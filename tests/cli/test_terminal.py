"""``hangar session shell NAME [--agent]``, the terminal over the websocket, run as a person
would (its own process, standard input a pipe) against a real ``hangar serve``."""

from __future__ import annotations

import json
import os
import re
import subprocess
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
