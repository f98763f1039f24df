"""Approvals through a real ``hangar serve`` with the real Claude Code and the model stub, over
the CLI: in ``ask`` mode the turn's command waits, listed in ``session get`` with its summary;
``kill -9`` of the server and a restart keep it waiting; ``session approve`` runs it once; an id
answered twice is refused; modes a harness cannot have are refused naming why. In
``deny-risky`` mode a forced push is denied by its rule, unasked, and a test run is asked."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from emulators.model import ModelStub
from tests.e2e.conftest import Server
from tests.e2e.test_acceptance import MODELS, add_env, get, until
from tests.harness.test_approvals import PUSHED, RAN, SCENARIO, TESTS
from tests.unit.sessions.receiver import SECRET, Receiver

pytestmark = [pytest.mark.sandbox, pytest.mark.e2e, pytest.mark.harness]


@pytest.fixture
def backends() -> dict[str, str]:
    """The surfaces are the same over every backend: the embedded ones are enough here."""
    return {}


@pytest.fixture
def stub() -> Iterator[ModelStub]:
    with ModelStub(SCENARIO) as running:
        yield running


def test_an_approval_waits_through_a_killed_server_and_runs_once_when_approved(
    real_server: Server, remote: Path, stub: ModelStub
) -> None:
    server = real_server
    receiver = Receiver()
    server.stop()
    server.extra_env.update(HANGAR_NOTIFY_URL=receiver.url, HANGAR_NOTIFY_SECRET=SECRET)
    server.start()
    add_env(server, remote, stub)
    for harness, mode, why in (("pi", "ask", "not pi"), ("antigravity", "deny-risky",
                                                         "not antigravity")):  # fmt: skip
        refused = server.cli("session", "new", "no", "hi", "--env", "app", "--harness", harness,
                             "--permission-mode", mode)  # fmt: skip
        assert refused.returncode == 1 and "(invalid_input)" in refused.stderr, refused.stderr
        assert why in refused.stderr
    server.ok("session", "new", "asked", "asked turn: run it", "--env", "app", "--harness",
              "claude", "--model", MODELS["claude"], "--permission-mode", "ask")  # fmt: skip
    until(lambda: bool(get(server, "asked")["pending_approvals"]), 240)
    (pending,) = get(server, "asked")["pending_approvals"]
    assert pending["tool"] == "Bash" and RAN in pending["summary"] and pending["turn"] == 1
    shown = server.ok("session", "get", "asked")
    assert f"waits for approval {pending['id']}" in shown
    [sandbox] = server.sandboxes().list()
    assert not server.sandboxes().exec(sandbox.id, ["test", "-e", RAN]).ok  # it waits
    (told,) = receiver.wait_for(1)  # HANGAR_NOTIFY_URL was told, signed
    assert told["signed"] and told["body"]["event"] == "approval_pending"
    assert told["body"]["approval_id"] == pending["id"] and told["body"]["session"] == "asked"
    receiver.close()

    server.kill()  # kill -9: nothing of the approval is in the server's memory
    server.start()
    assert [a["id"] for a in get(server, "asked")["pending_approvals"]] == [pending["id"]]
    said = server.ok("session", "approve", "asked", pending["id"])
    assert f"approved {pending['id']}" in said
    twice = server.cli("session", "approve", "asked", pending["id"])
    assert twice.returncode == 1 and "(approval_not_found)" in twice.stderr, twice.stderr
    assert server.ok("session", "wait", "asked").strip() == "Asked turn done."
    detail = get(server, "asked")
    assert detail["pending_approvals"] == [] and detail["turns"][0]["outcome"] == "exited"
    ran = server.sandboxes().exec(sandbox.id, ["cat", RAN])
    assert ran.stdout == b"ran\n"  # once
    assert json.dumps(detail).count(pending["id"]) == 0


def test_an_agent_over_mcp_is_told_of_an_approval_and_denies_it(
    real_server: Server, remote: Path, stub: ModelStub
) -> None:
    from tests.mcp.test_tools import mcp_of

    server = real_server
    add_env(server, remote, stub)
    mcp = mcp_of(server)
    mcp.ok("new_session", name="asked", message="asked turn: run it", env="app",
           harness="claude", model=MODELS["claude"], permission_mode="ask")  # fmt: skip
    waited = mcp.ok("wait_for_turn", ref="asked", timeout_seconds=240)
    assert waited["done"] is False, waited
    (pending,) = waited["pending_approvals"]
    assert pending["tool"] == "Bash" and RAN in pending["summary"]
    denied = mcp.ok("deny", ref="asked", approval=pending["id"], message="not this one")
    assert (denied["decision"], denied["turn"]) == ("deny", 1)
    again = mcp.call("approve", ref="asked", approval=pending["id"])
    assert again.is_error and again.body["error"]["code"] == "approval_not_found", again.body
    done = mcp.ok("wait_for_turn", ref="asked", timeout_seconds=240)
    assert (done["done"], done["outcome"], done["summary"]) == (True, "exited", "Asked turn done.")
    [sandbox] = server.sandboxes().list()
    assert not server.sandboxes().exec(sandbox.id, ["test", "-e", RAN]).ok  # it never ran


def test_deny_risky_denies_a_forced_push_by_its_rule_and_asks_for_a_test_run(
    real_server: Server, remote: Path, stub: ModelStub
) -> None:
    server = real_server
    add_env(server, remote, stub)
    server.ok("env", "update", "app", "--deny-rule", "no-deploy=make deploy")
    server.ok("session", "new", "risky", "risky turn: push it", "--env", "app", "--harness",
              "claude", "--model", MODELS["claude"], "--permission-mode", "deny-risky")  # fmt: skip
    until(lambda: bool(get(server, "risky")["pending_approvals"]), 240)
    (pending,) = get(server, "risky")["pending_approvals"]
    assert TESTS in pending["summary"]  # the push was denied unasked; the test run is asked
    server.ok("session", "approve", "risky", pending["id"])
    assert server.ok("session", "wait", "risky").strip() == "Risky turn done."
    told = [r for r in stub.requests("anthropic") if "force-push" in json.dumps(r["body"])]
    assert told, "the model was not told which rule denied the push"
    [sandbox] = server.sandboxes().list()
    assert server.sandboxes().exec(sandbox.id, ["cat", TESTS]).stdout == b"tests ran\n"
    pushed = server.sandboxes().exec(sandbox.id, ["test", "-e", PUSHED])
    assert not pushed.ok  # the push never ran


def test_an_approval_nobody_answers_is_denied_after_the_timeout(
    real_server: Server, remote: Path, stub: ModelStub
) -> None:
    server = real_server
    server.stop()
    server.extra_env["HANGAR_APPROVAL_TIMEOUT_MINUTES"] = "0.02"  # a second and a bit
    server.start()
    add_env(server, remote, stub)
    server.ok("session", "new", "forgot", "asked turn: run it", "--env", "app", "--harness",
              "claude", "--model", MODELS["claude"], "--permission-mode", "ask")  # fmt: skip
    assert server.ok("session", "wait", "forgot").strip() == "Asked turn done."
    told = [r for r in stub.requests("anthropic") if "nobody answered" in json.dumps(r["body"])]
    assert told, "the model was not told why it was denied"
    [sandbox] = server.sandboxes().list()
    assert not server.sandboxes().exec(sandbox.id, ["test", "-e", RAN]).ok
