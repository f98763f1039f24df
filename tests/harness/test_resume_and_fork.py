"""The real Claude Code, Codex and pi CLIs, in local sandboxes, against the model stub: a turn
that commits, leaves a change and an untracked file; checkpoint; destroy; restore into a new
sandbox; a resumed turn that carries the whole first turn. And forks that diverge."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from emulators.model import ModelStub
from tests.harness.conftest import Agent

pytestmark = [pytest.mark.harness, pytest.mark.sandbox]

TURN_ONE = "turn one: make the first change"
TURN_TWO = "turn two: carry on from where you were"
TOOL_MARKER = "TOOL-RESULT-7f3a"
SCENARIO = {
    "rules": [
        {
            "when": "turn one",
            "steps": [
                {"shell": "echo one > committed.txt && git add committed.txt && "
                          "git commit -qm 'first change' && echo COMMITTED"},  # fmt: skip
                {"shell": f"echo 'uncommitted line' >> README.md && echo note > notes.txt && "
                          f"echo {TOOL_MARKER}"},  # fmt: skip
                {"text": "Turn one done."},
            ],
        },
        {"when": "turn two", "steps": [{"text": "Turn two done."}]},
        {"when": "fork branch", "steps": [{"text": "Forked: {prompt}"}]},
        {"when": "again", "steps": [{"text": "Again: {prompt}"}]},
    ],
    "models": ["claude-sonnet-4-5", "gpt-5-codex", "stub-model"],
}


@pytest.fixture
def stub() -> Iterator[ModelStub]:
    with ModelStub(SCENARIO) as running:
        yield running


def first_turn_then_checkpoint(agent: Agent) -> str:
    """Turn one in a sandbox, a checkpoint, and the sandbox destroyed; returns the conversation."""
    engine = agent.engine
    sandbox, workspace = engine.sandbox()
    first = agent.turn(sandbox, agent.spec(TURN_ONE, new_id=str(uuid.uuid4())))
    assert first.summary == "Turn one done."
    assert first.conversation_id
    engine.take(sandbox, workspace)
    engine.sandboxes.destroy(sandbox)
    return first.conversation_id


def test_a_resumed_turn_in_a_new_sandbox_carries_the_whole_first_turn(agent: Agent) -> None:
    engine = agent.engine
    conversation = first_turn_then_checkpoint(agent)

    sandbox, workspace = engine.sandbox()
    report = engine.restorer.restore(engine.session.id, sandbox, workspace.repo_dir)
    assert report is not None and not report.fell_back
    assert engine.sh(sandbox, "git log -1 --format=%s; cat notes.txt; git diff --stat | tail -1") == (
        "first change\nnote\n 1 file changed, 1 insertion(+)\n"
    )

    second = agent.turn(sandbox, agent.spec(TURN_TWO, conversation_id=conversation))
    assert second.conversation_id == conversation
    assert second.summary == "Turn two done."
    sent = agent.last_request()
    assert TURN_ONE in sent and TOOL_MARKER in sent and TURN_TWO in sent
    assert sent.index(TURN_ONE) < sent.index(TOOL_MARKER) < sent.index(TURN_TWO)


def test_forks_carry_the_history_and_diverge_afterwards(agent: Agent) -> None:
    if not agent.harness.can_fork:
        pytest.fail(f"{agent.harness.name} should fork natively")
    engine = agent.engine
    original = first_turn_then_checkpoint(agent)

    forks: dict[str, str] = {}
    sandboxes: dict[str, str] = {}
    for branch in ("alpha", "beta"):
        sandbox, workspace = engine.sandbox()
        engine.restorer.restore(engine.session.id, sandbox, workspace.repo_dir)
        result = agent.turn(
            sandbox, agent.spec(f"fork branch {branch}", fork_from=original, new_id=str(uuid.uuid4()))
        )
        assert result.summary == f"Forked: fork branch {branch}"
        sent = agent.last_request()
        assert TURN_ONE in sent and TOOL_MARKER in sent
        assert result.conversation_id
        forks[branch] = result.conversation_id
        sandboxes[branch] = sandbox
    assert len({original, forks["alpha"], forks["beta"]}) == 3

    again = agent.turn(
        sandboxes["alpha"], agent.spec("alpha again", conversation_id=forks["alpha"])
    )
    assert again.conversation_id == forks["alpha"]
    sent = agent.last_request()
    assert "fork branch alpha" in sent and TURN_ONE in sent
    assert "fork branch beta" not in sent
