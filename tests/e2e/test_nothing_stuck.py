"""No session is ever stuck: the ways sessions used to get stuck for good, each through the CLI
against a real ``hangar serve``, and each ending in a session that works."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from hangar.sandboxes import SandboxSpec
from tests.e2e.conftest import HANGAR, STANDIN_SETTINGS, Server, _server, standin_harnesses
from tests.e2e.test_acceptance import IDENTITY, add_env, get, until
from tests.mcp.client import Mcp

pytestmark = [pytest.mark.e2e, pytest.mark.sandbox]


def state(server: Server, name: str) -> str:
    return str(get(server, name)["state"])


def test_a_deleted_environment_fails_the_send_and_leaves_the_session_as_it_was(
    standin_server: Server, remote: Path
) -> None:
    server = standin_server
    add_env(server, remote)
    server.ok("session", "new", "orphan", "run: echo kept > kept.txt", "--env", "app",
              "--harness", "antigravity", "-w")  # fmt: skip
    server.ok("session", "suspend", "orphan")
    in_use = server.cli("env", "delete", "app")
    assert in_use.returncode == 1 and "environment_in_use" in in_use.stderr
    assert "orphan" in in_use.stderr
    server.ok("env", "delete", "app", "--force")
    refused = server.cli("session", "send", "orphan", "more")
    assert refused.returncode == 1 and "environment_not_found" in refused.stderr
    assert state(server, "orphan") == "suspended"  # not starting for ever
    add_env(server, remote)
    server.ok("session", "send", "orphan", "run: cat kept.txt", "-w")
    assert server.ok("session", "shell", "orphan", "--", "cat", "kept.txt") == "kept\n"


def test_a_server_killed_during_setup_finishes_the_start_after_its_restart(
    standin_server: Server, remote: Path
) -> None:
    server = standin_server
    server.ok("env", "add", "slow", "--repo", str(remote), "--setup",
              "while [ ! -e /tmp/go ]; do sleep 0.05; done; touch ~/setup-done")  # fmt: skip
    server.ok("session", "new", "survivor", "run: ls ~/setup-done", "--env", "slow",
              "--harness", "antigravity")  # fmt: skip
    until(lambda: (get(server, "survivor").get("phase") or {}).get("step") == "running_setup")
    server.kill()
    [sandbox] = server.sandboxes().list()  # the setup runs on without the control plane
    server.start()
    server.sandboxes().exec(sandbox.id, ["touch", "/tmp/go"])
    until(lambda: state(server, "survivor") == "idle", timeout=90)
    detail = get(server, "survivor")
    assert [t["outcome"] for t in detail["turns"]] == ["exited"]
    assert detail["sandbox_id"] == sandbox.id and detail["start_error"] is None


def test_a_start_asked_for_just_before_the_server_died_goes_on_after_its_restart(
    standin_server: Server, remote: Path
) -> None:
    server = standin_server
    add_env(server, remote)
    server.ok("session", "new", "late", "run: echo done > done.txt", "--env", "app",
              "--harness", "antigravity")  # fmt: skip
    server.kill()  # whatever step it was at, a claim and a tick are in the database
    server.start()
    until(lambda: state(server, "late") == "idle", timeout=90)
    assert server.ok("session", "shell", "late", "--", "cat", "done.txt") == "done\n"
    assert len(server.sandboxes().list()) == 1


def test_a_server_killed_during_a_suspend_finishes_it_after_its_restart(
    tmp_path: Path, remote: Path
) -> None:
    big = {"HANGAR_SESSION_MAX_UNTRACKED_MB": "1000", "HANGAR_SESSION_MAX_PART_MB": "1000"}
    for server in _server(tmp_path / "data", standin_harnesses(tmp_path), **STANDIN_SETTINGS,
                          **big):  # fmt: skip
        add_env(server, remote)
        server.ok("session", "new", "heavy", "run: head -c 150000000 /dev/urandom > big.bin && "
                  "sha256sum big.bin > big.sum", "--env", "app", "--harness", "antigravity",
                  "-w")  # fmt: skip
        suspend = subprocess.Popen([HANGAR, "session", "suspend", "heavy"], env=server.env(),
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
        until(lambda: state(server, "heavy") == "suspending", timeout=60)
        server.kill()
        suspend.wait(30)
        server.start()
        until(lambda: state(server, "heavy") == "suspended", timeout=90)
        assert server.sandboxes().list() == []
        reasons = [c["reason"] for c in get(server, "heavy")["checkpoints"]]
        assert reasons[-1] == "suspend"
        assert server.ok("session", "shell", "heavy", "--", "sha256sum", "-c", "big.sum") == (
            "big.bin: OK\n")


def test_delete_takes_a_sandbox_a_dead_start_left_behind(
    standin_server: Server, remote: Path
) -> None:
    server = standin_server
    add_env(server, remote)
    server.ok("session", "new", "leaky", "hi", "--env", "app", "--harness", "antigravity", "-w")
    session: dict[str, Any] = json.loads(server.ok("session", "get", "leaky", "--json"))
    orphan = server.sandboxes().create(SandboxSpec(labels={"hangar.session": session["id"]}))
    server.ok("session", "delete", "leaky")
    assert orphan.id not in {i.id for i in server.sandboxes().list()}
    assert server.sandboxes().list() == []


def test_a_hung_turn_ends_timed_out_and_the_cli_and_mcp_say_why_then_the_next_send_works(
    tmp_path: Path, remote: Path
) -> None:
    """The stand-in says nothing on a prompt holding HANG (after its run: lines): with the idle
    limit at three seconds, ``-w`` and ``wait_for_turn`` end with why, the work is kept, and a
    send's own --turn-timeout is held to as well."""
    hang = "and now hang"
    for server in _server(tmp_path / "data", standin_harnesses(tmp_path), **STANDIN_SETTINGS,
                          HANGAR_TURN_IDLE_MINUTES="0.05"):  # fmt: skip
        server.ok("env", "add", "app", "--repo", str(remote), *IDENTITY, "--var",
                  f"AGY_STANDIN_HANG_ON={hang}")  # fmt: skip
        server.ok("session", "new", "hung", "run: echo one > one.txt", "--env", "app",
                  "--harness", "antigravity", "-w")  # fmt: skip
        waited = server.cli("session", "send", "hung", f"run: echo late > late.txt\n{hang}",
                            "-w")  # fmt: skip
        assert waited.returncode == 1, waited
        assert "turn 2 of hung timed out: the turn had no output for 3 seconds" in waited.stderr
        assert waited.stderr.rstrip().endswith("(timed_out)"), waited.stderr
        mcp = Mcp(server.url, (server.data_dir / "admin-token").read_text().strip())
        answer = mcp.ok("wait_for_turn", ref="hung", timeout_seconds=5)
        assert answer["done"] and answer["outcome"] == "timed_out", answer
        assert answer["summary"].startswith("the turn had no output for 3 seconds")
        assert state(server, "hung") == "idle"
        assert get(server, "hung")["checkpoints"][-1]["reason"] == "turn"

        limited = server.cli("session", "send", "hung", hang, "--turn-timeout", "0.02", "-w")
        assert limited.returncode == 1, limited
        assert "turn 3 of hung timed out: the turn timed out after 1.2 seconds" in limited.stderr
        assert get(server, "hung")["turns"][-1]["timeout_minutes"] == 0.02

        server.ok("session", "send", "hung", "run: cat late.txt > seen.txt", "-w")
        assert server.ok("session", "shell", "hung", "--", "cat", "seen.txt") == "late\n"
