"""The sessions acceptance, tried as a new user would: through the ``hangar`` CLI against a
real ``hangar serve``, with the real Claude Code, Codex and pi CLIs talking to the model stub
(and the Antigravity stand-in where a model adds nothing)."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from emulators.model import ModelStub
from tests.e2e.conftest import HANGAR, Server

pytestmark = [pytest.mark.sandbox, pytest.mark.e2e]

TURN_ONE = "turn one: make the first change"
TURN_TWO = "turn two: what did you do before?"
MARKER = "TOOL-OUTPUT-5d1e"
SCENARIO = {
    "rules": [
        {"when": "turn one", "steps": [
            {"shell": "echo one > committed.txt && git add committed.txt && "
                      "git commit -qm 'first change'"},
            {"shell": f"echo 'uncommitted line' >> README.md && echo note > notes.txt && "
                      f"echo {MARKER}"},
            {"text": "Turn one done."}]},
        {"when": "turn two", "steps": [{"text": "I committed, edited README.md, wrote notes.txt."}]},
        {"when": "fork", "steps": [{"text": "Forked: {prompt}"}]},
    ],
    "models": ["claude-sonnet-4-5", "gpt-5-codex", "stub-model"],
}  # fmt: skip
MODELS = {"claude": "claude-sonnet-4-5", "codex": "gpt-5-codex", "pi": "stub-model"}
API = {"claude": "anthropic", "codex": "responses", "pi": "chat"}
IDENTITY = ["--var", "GIT_AUTHOR_NAME=Agent", "--var", "GIT_AUTHOR_EMAIL=agent@example.com",
            "--var", "GIT_COMMITTER_NAME=Agent", "--var", "GIT_COMMITTER_EMAIL=agent@example.com"]  # fmt: skip


@pytest.fixture
def stub() -> Iterator[ModelStub]:
    with ModelStub(SCENARIO) as running:
        yield running


def get(server: Server, name: str) -> dict[str, Any]:
    return dict(json.loads(server.ok("session", "get", name, "--json")))


def until(predicate: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def add_env(server: Server, remote: Path, stub: ModelStub | None = None) -> None:
    endpoint = []
    if stub is not None:
        endpoint = ["--var", f"ANTHROPIC_BASE_URL={stub.url}", "--var",
                    f"OPENAI_BASE_URL={stub.url}/v1", "--secret", "ANTHROPIC_API_KEY=sk-stub",
                    "--secret", "OPENAI_API_KEY=sk-stub", "--host-port", str(stub.port)]  # fmt: skip
    server.ok("env", "add", "app", "--repo", str(remote), *IDENTITY, *endpoint)


@pytest.mark.harness
@pytest.mark.parametrize("harness", ["claude", "codex", "pi"])
def test_a_suspended_session_resumes_in_a_new_sandbox_with_its_work_and_conversation(
    real_server: Server, remote: Path, stub: ModelStub, harness: str
) -> None:
    server = real_server
    add_env(server, remote, stub)
    out = server.ok("session", "new", "work", TURN_ONE, "--env", "app", "--harness", harness,
                    "--model", MODELS[harness], "-w")  # fmt: skip
    assert out.strip() == "Turn one done."
    first = get(server, "work")
    assert first["state"] == "idle" and first["turns"][0]["outcome"] == "exited"
    assert first["harness_session"] and first["checkpoints"][0]["reason"] == "turn"

    suspended = json.loads(server.ok("session", "suspend", "work", "--json"))
    assert suspended["state"] == "suspended" and suspended["sandbox_id"] is None
    assert server.sandboxes().list() == []

    resume_and_check(server, stub, harness, first)


def resume_and_check(server: Server, stub: ModelStub, harness: str,
                     first: dict[str, Any]) -> None:  # fmt: skip
    """Send turn two to the suspended session ``work``: it resumes in a new sandbox with turn
    one's commit, edit and file, and the model is sent the whole conversation."""
    server.ok("session", "send", "work", TURN_TWO, "-w")
    second = get(server, "work")
    assert second["harness_session"] == first["harness_session"]
    assert second["sandbox_id"] and second["sandbox_id"] != first["sandbox_id"]
    shown = server.ok("session", "shell", "work", "--", "sh", "-c",
                      "git log -1 --format=%s; cat notes.txt; git diff --stat | tail -1")  # fmt: skip
    assert shown == "first change\nnote\n 1 file changed, 1 insertion(+)\n"
    requests = [r for r in stub.requests(API[harness]) if r["body"].get("tools")]
    sent = ModelStub.transcript(requests[-1]["body"])
    assert TURN_ONE in sent and MARKER in sent and TURN_TWO in sent


@pytest.mark.harness
def test_fork_makes_sessions_with_their_own_forked_conversations(
    real_server: Server, remote: Path, stub: ModelStub
) -> None:
    server = real_server
    add_env(server, remote, stub)
    server.ok("session", "new", "base", TURN_ONE, "--env", "app", "--harness", "claude",
              "--model", MODELS["claude"], "-w")  # fmt: skip
    original = get(server, "base")["harness_session"]
    names = server.ok("session", "fork", "base", "2").split()
    assert names == ["base-fork-1", "base-fork-2"]
    conversations = set()
    for name in names:
        assert server.ok("session", "send", name, f"fork {name}", "-w").strip() == f"Forked: fork {name}"
        detail = get(server, name)
        assert detail["checkpoints"][0]["reason"] == "manual"
        conversations.add(detail["harness_session"])
    assert len(conversations) == 2 and original not in conversations


def test_an_unused_session_suspends_by_itself_but_not_while_a_shell_runs(
    standin_server: Server, remote: Path
) -> None:
    server = standin_server
    add_env(server, remote)
    # Never idle until the shell holds its lease: otherwise the shell races the first idle
    # check (1.2 s) and, on a slow machine, finds the session already suspending.
    server.ok("session", "new", "idle", "hello", "--env", "app", "--harness", "antigravity",
              "--idle", "0", "-w")  # fmt: skip
    shell = subprocess.Popen(
        [HANGAR, "session", "shell", "idle", "--", "sh", "-c",
         "touch /tmp/started; while [ ! -e /tmp/stop ]; do sleep 0.1; done"],
        env=server.env(), stdin=subprocess.DEVNULL,
    )  # fmt: skip
    stopper = server.sandboxes()
    [sandbox] = stopper.list()
    # The lease is taken before the command starts: once it runs, the shell holds it.
    until(lambda: stopper.exec(sandbox.id, ["test", "-e", "/tmp/started"]).ok)
    server.ok("session", "keep", "idle", "--idle", "0.02")
    time.sleep(4)  # several idle periods pass while the shell runs
    assert get(server, "idle")["state"] == "idle"
    stopper.exec(sandbox.id, ["touch", "/tmp/stop"])
    assert shell.wait(30) == 0
    until(lambda: get(server, "idle")["state"] == "suspended")
    detail = get(server, "idle")
    assert detail["sandbox_id"] is None and detail["checkpoints"][-1]["reason"] == "suspend"


def test_two_concurrent_sends_start_one_turn_and_refuse_the_other(
    standin_server: Server, remote: Path
) -> None:
    server = standin_server
    add_env(server, remote)
    server.ok("session", "new", "busy", "hello", "--env", "app", "--harness", "antigravity", "-w")
    results: list[subprocess.CompletedProcess[str]] = []
    barrier = threading.Barrier(2)

    def send(n: int) -> None:
        barrier.wait()
        results.append(server.cli("session", "send", "busy", f"wait-for: /tmp/go\nsend {n}"))

    threads = [threading.Thread(target=send, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    codes = sorted(r.returncode for r in results)
    assert codes == [0, 1]
    refused = next(r for r in results if r.returncode == 1)
    assert refused.stderr.count("\n") == 1 and "(session_busy)" in refused.stderr
    [sandbox] = server.sandboxes().list()
    server.sandboxes().exec(sandbox.id, ["touch", "/tmp/go"])
    until(lambda: get(server, "busy")["state"] == "idle")
    assert [t["outcome"] for t in get(server, "busy")["turns"]] == ["exited", "exited"]


def test_a_turn_survives_a_killed_server_and_finishes_after_the_restart(
    standin_server: Server, remote: Path
) -> None:
    server = standin_server
    add_env(server, remote)
    server.ok("session", "new", "survivor", "wait-for: /tmp/go\nrun: echo kept > kept.txt",
              "--env", "app", "--harness", "antigravity")  # fmt: skip
    until(lambda: get(server, "survivor")["state"] == "active")
    server.kill()
    [sandbox] = server.sandboxes().list()  # the turn runs on without the control plane
    server.sandboxes().exec(sandbox.id, ["touch", "/tmp/go"])
    server.start()
    until(lambda: get(server, "survivor")["state"] == "idle")
    detail = get(server, "survivor")
    assert detail["turns"][0]["outcome"] == "exited"
    assert detail["checkpoints"][-1]["reason"] == "turn"
    assert server.ok("session", "shell", "survivor", "--", "cat", "kept.txt") == "kept\n"
    # a one-shot turn's start and end trees, recorded in the sandbox by the run's supervisor
    assert [s["tool"] for s in detail["turns"][0]["steps"]] == ["start", "end"]
    assert "+kept" in server.ok("session", "tree", "survivor", "1", "1")


def test_a_sandbox_destroyed_by_hand_leaves_a_checkpoint_and_the_session_resumes(
    standin_server: Server, remote: Path
) -> None:
    server = standin_server
    add_env(server, remote)
    server.ok("session", "new", "taken", "run: echo wip > wip.txt", "--env", "app",
              "--harness", "antigravity", "-w")  # fmt: skip
    sandbox = get(server, "taken")["sandbox_id"]
    assert sandbox in server.ok("sandbox", "list")
    server.ok("sandbox", "destroy", sandbox)
    detail = get(server, "taken")
    assert detail["state"] == "suspended" and detail["checkpoints"][-1]["reason"] == "destroy"
    assert server.ok("session", "shell", "taken", "--", "cat", "wip.txt") == "wip\n"
    assert get(server, "taken")["sandbox_id"] not in (None, sandbox)


def test_bad_input_gets_one_clear_error_and_changes_nothing(
    standin_server: Server, remote: Path, tmp_path: Path
) -> None:
    server = standin_server
    add_env(server, remote)
    server.ok("session", "new", "taken", "hello", "--env", "app", "--harness", "antigravity", "-w")
    cases = [
        (["session", "new", "x", "hi", "--env", "nope", "--harness", "antigravity"],
         "environment_not_found"),
        (["session", "new", "taken", "hi", "--env", "app", "--harness", "antigravity"],
         "name_taken"),
        (["session", "get", "ghost"], "session_not_found"),
        (["env", "add", "ghost", "--repo", str(tmp_path / "missing.git")], "invalid_input"),
    ]  # fmt: skip
    for args, code in cases:
        done = server.cli(*args)
        assert done.returncode == 1, args
        assert done.stderr.count("\n") == 1 and f"({code})" in done.stderr, done.stderr
    unknown = server.cli("session", "new", "x", "hi", "--env", "app", "--harness", "cursor")
    assert unknown.returncode == 2 and "cursor" in unknown.stderr
    listed = json.loads(server.ok("session", "list", "--json"))["sessions"]
    assert [s["name"] for s in listed] == ["taken"]
    assert [e["name"] for e in json.loads(server.ok("env", "list", "--json"))] == ["app"]


def test_the_admin_token_is_private_and_never_printed(standin_server: Server) -> None:
    token_file = standin_server.data_dir / "admin-token"
    assert token_file.stat().st_mode & 0o777 == 0o600
    secret = token_file.read_text().strip()
    assert standin_server.log is not None
    log = standin_server.log.read_text()
    assert str(token_file) in log and secret not in log
