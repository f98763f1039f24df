"""Following turns from the CLI as a person would: a model API that does not answer shows as
retries with their reason, Ctrl-C stops the following and says the turn goes on, ``session
wait`` re-attaches (and gives up after ``--timeout``), ``session interrupt`` ends the turn as
interrupted with its work checkpointed, and ``session log`` reads as lines."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import threading
from pathlib import Path

import pytest

from tests.e2e.conftest import HANGAR, Server, free_port
from tests.e2e.test_acceptance import IDENTITY, MODELS, get, until

pytestmark = [pytest.mark.sandbox, pytest.mark.e2e]


def stderr_lines(proc: subprocess.Popen[str]) -> queue.Queue[str]:
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stderr is not None
        for text in proc.stderr:
            lines.put(text)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def next_line(lines: queue.Queue[str], containing: str, timeout: float = 60) -> str:
    seen = []
    while True:
        try:
            text = lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no line with {containing!r} in {timeout} s: {seen}") from None
        seen.append(text)
        if containing in text:
            return text


def ctrl_c_as_a_terminal_sends_it() -> None:
    """In the CLI's process: SIGINT as a shell in a terminal leaves it. A suite started in the
    background inherits SIGINT ignored, and Python then never turns it into Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.harness
def test_a_model_api_that_does_not_answer_shows_as_retries_and_the_turn_can_be_stopped(
    real_server: Server, remote: Path
) -> None:
    server = real_server
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there, in the sandbox or out
    server.ok("env", "add", "app", "--repo", str(remote), *IDENTITY, "--var",
              f"ANTHROPIC_BASE_URL={dead}", "--secret", "ANTHROPIC_API_KEY=sk-none")  # fmt: skip
    proc = subprocess.Popen(
        [HANGAR, "session", "new", "stuck", "hello", "--env", "app", "--harness", "claude",
         "--model", MODELS["claude"], "-w"],
        env=server.env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, preexec_fn=ctrl_c_as_a_terminal_sends_it,
    )  # fmt: skip
    lines = stderr_lines(proc)
    retry = next_line(lines, "model API retry")
    assert "/10 in " in retry
    proc.send_signal(signal.SIGINT)
    assert proc.wait(30) == 130
    said = next_line(lines, "stopped following")
    assert "goes on" in said and "hangar session wait stuck" in said and said.endswith(
        "(detached)\n")  # fmt: skip
    assert get(server, "stuck")["state"] == "active"  # Ctrl-C stopped the CLI, not the turn

    waited = server.cli("session", "wait", "stuck", "--timeout", "1")
    assert waited.returncode == 124 and "still running after 1 s" in waited.stderr
    assert "model API retry" in waited.stderr  # re-attached: the progress so far, again

    out = server.ok("session", "interrupt", "stuck")
    assert out == "turn 1 of stuck interrupted; its work is checkpointed\n"
    session = get(server, "stuck")
    assert session["state"] == "idle" and session["turns"][0]["outcome"] == "interrupted"
    assert session["checkpoints"][-1]["reason"] == "turn" and session["error"] is None
    again = server.cli("session", "interrupt", "stuck")
    assert again.returncode == 1 and "(invalid_state)" in again.stderr
    after = server.cli("session", "wait", "stuck")
    assert after.returncode == 1 and "interrupted" in after.stderr
    assert after.stderr.count("\n") == after.stderr.count("  model API") + 1

    log = server.ok("session", "log", "stuck")
    assert "model API retry 1/10" in log and "{" not in log
    raw = server.ok("session", "log", "stuck", "--raw")
    assert '"subtype":"api_retry"' in raw.replace(" ", "")


def test_session_wait_re_attaches_to_a_running_turn_and_prints_its_summary_once(
    standin_server: Server, remote: Path
) -> None:
    server = standin_server
    server.ok("env", "add", "app", "--repo", str(remote), *IDENTITY)
    server.ok("session", "new", "slow", "wait-for: /tmp/go\nrun: echo step one", "--env", "app",
              "--harness", "antigravity")  # fmt: skip
    until(lambda: get(server, "slow")["state"] == "active")
    waiter = subprocess.Popen(
        [HANGAR, "session", "wait", "slow", "--json"], env=server.env(),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    server.ok("session", "shell", "slow", "--", "touch", "/tmp/go")
    out, err = waiter.communicate(timeout=60)
    assert waiter.returncode == 0, err
    turn = json.loads(out)
    assert turn["outcome"] == "exited" and turn["summary"].startswith("Seen 0 earlier messages")
    assert err.count("Seen 0 earlier messages") == 0  # the summary is not shown as progress too

    plain = server.cli("session", "wait", "slow")  # a finished turn: its summary at once
    assert plain.returncode == 0 and plain.stdout == turn["summary"] + "\n"
    assert plain.stdout.count("Seen 0") == 1 and "Seen 0" not in plain.stderr
