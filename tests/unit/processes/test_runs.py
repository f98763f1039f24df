"""Detached runs in real sandboxes: started under hangar's supervisor, read from a cursor,
scoped env."""

from __future__ import annotations

import pytest

from hangar.errors import SandboxError
from hangar.processes.runs import INTERRUPTED_EXIT, read_run, start_run, stop_run, wait_run
from hangar.sandboxes import SandboxSpec, SandboxUser
from hangar.sandboxes.local import LocalSandboxes

pytestmark = pytest.mark.sandbox


def test_a_run_returns_at_once_and_a_late_reader_catches_up_from_its_cursor(
    sandboxes: LocalSandboxes,
) -> None:
    sandbox = sandboxes.create(SandboxSpec()).id
    script = "echo first; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo second; exit 7"
    start_run(sandboxes, sandbox, "r1", ["bash", "-c", script], cwd="/tmp", env={})

    status = read_run(sandboxes, sandbox, "r1")
    for _ in range(100):  # bounded wait for the first line
        if status.data:
            break
        status = read_run(sandboxes, sandbox, "r1")
    assert status.data == b"first\n" and not status.finished, "the run waits for /tmp/go"

    sandboxes.exec(sandbox, ["touch", "/tmp/go"])
    rest, code = wait_run(sandboxes, sandbox, "r1", timeout=30, poll=0.05)
    assert code == 7
    assert rest == b"first\nsecond\n"
    tail = read_run(sandboxes, sandbox, "r1", cursor=status.cursor)
    assert tail.data == b"second\n" and tail.exit_code == 7


def test_the_environment_reaches_only_its_own_run_and_its_file_is_gone(
    sandboxes: LocalSandboxes,
) -> None:
    sandbox = sandboxes.create(SandboxSpec()).id
    secret = "s3cr3t value with 'quotes' and $dollars"
    start_run(sandboxes, sandbox, "with", ["sh", "-c", 'printf %s "$API_TOKEN"'], cwd="/tmp",
              env={"API_TOKEN": secret})  # fmt: skip
    log, code = wait_run(sandboxes, sandbox, "with", timeout=30, poll=0.05)
    assert (log.decode(), code) == (secret, 0)
    start_run(sandboxes, sandbox, "without", ["sh", "-c", 'printf %s "${API_TOKEN:-unset}"'],
              cwd="/tmp", env={})  # fmt: skip
    log, _ = wait_run(sandboxes, sandbox, "without", timeout=30, poll=0.05)
    assert log == b"unset"
    # The secret's only trace is what the process itself printed: no env file, not in a spec.
    leftover = sandboxes.exec(sandbox, ["sh", "-c", "grep -rl s3cr3t /hangar /root /tmp || true"],
                              user=SandboxUser.HANGAR)  # fmt: skip
    assert leftover.stdout == b"/hangar/runs/with/log\n"


def test_stopping_a_run_ends_it_with_the_interrupted_status(sandboxes: LocalSandboxes) -> None:
    sandbox = sandboxes.create(SandboxSpec()).id
    start_run(sandboxes, sandbox, "long", ["sleep", "300"], cwd="/tmp", env={})
    stop_run(sandboxes, sandbox, "long")
    _, code = wait_run(sandboxes, sandbox, "long", timeout=30, poll=0.05)
    assert code == INTERRUPTED_EXIT
    assert b"sleep 300" not in sandboxes.exec(sandbox, ["ps", "-eo", "args"]).stdout


def test_reading_a_run_that_does_not_exist_is_a_clear_error(sandboxes: LocalSandboxes) -> None:
    sandbox = sandboxes.create(SandboxSpec()).id
    with pytest.raises(SandboxError, match="no run nope"):
        read_run(sandboxes, sandbox, "nope")
