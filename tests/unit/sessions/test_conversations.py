"""Which conversation a turn resumes, and what its prompt carries, as a session moves between
harnesses; what a switch changes; which folders its checkpoints carry."""

from __future__ import annotations

import pytest

from hangar.errors import InvalidInput, UnknownHarness
from hangar.harnesses import get_harness
from hangar.harnesses.handoff import MARKER
from hangar.models import Conversation, Session, Turn
from hangar.sessions.conversations import after_turn, conversation_dirs, prompt, switch


def session(**fields: object) -> Session:
    base: dict[str, object] = {"name": "s", "environment": "app", "harness": "claude",
                               "branch": "hangar/session/s"}  # fmt: skip
    return Session.model_validate({**base, **fields})


def turn(n: int, harness: str | None, message: str = "", summary: str | None = None) -> Turn:
    return Turn(session_id="ses-1", n=n, message=message or f"ask {n}",
                summary=summary or f"did {n}", harness=harness)  # fmt: skip


CLAUDE, CODEX = get_harness("claude"), get_harness("codex")


def test_a_first_turn_on_a_new_harness_carries_the_whole_account() -> None:
    moved = session(harness="codex", conversations={"claude": Conversation(id="c1", last_turn=2)})
    earlier = [turn(1, "claude", "build the flow"), turn(2, "claude")]
    text, handoff = prompt(moved, CODEX, turn(3, None, "now the email step"), earlier, [])
    assert handoff and text.startswith(MARKER)
    assert "Original task: build the flow" in text and "1. Asked (claude): build the flow" in text
    assert "did 2" in text and text.endswith("now the email step")


def test_a_harness_resuming_its_own_conversation_hears_only_what_it_missed() -> None:
    back = session(harness_session="c1", conversations={
        "claude": Conversation(id="c1", last_turn=2), "codex": Conversation(id="x1", last_turn=4)})
    earlier = [turn(1, "claude"), turn(2, "claude"), turn(3, "codex", "add tests"), turn(4, "codex")]
    text, handoff = prompt(back, CLAUDE, turn(5, None, "ship it"), earlier, [])
    assert handoff and text.startswith(MARKER)
    assert "3. Asked (codex): add tests" in text and "4. Asked (codex)" in text
    assert "ask 1" not in text and "Original task" not in text and text.endswith("ship it")


def test_a_harness_that_saw_every_turn_resumes_with_the_message_alone() -> None:
    same = session(harness_session="c1", conversations={"claude": Conversation(id="c1",
                                                                             last_turn=2)})
    earlier = [turn(1, "claude"), turn(2, "claude"), turn(3, None)]  # 3: a record from before
    assert prompt(same, CLAUDE, turn(4, None, "go on"), earlier, []) == ("go on", False)


def test_a_fork_forks_natively_on_its_own_harness_and_hands_off_on_another() -> None:
    fork = session(fork_from="c1", forked_from="ses-0")
    source = [turn(1, "claude", "the original task")]
    assert prompt(fork, CLAUDE, turn(1, None, "go"), [], source) == ("go", False)
    moved = fork.model_copy(update=switch(fork, "codex", None))
    assert moved.fork_from is None
    text, handoff = prompt(moved, CODEX, turn(1, None, "go"), [], source)
    assert handoff and "Original task: the original task" in text


def test_a_new_session_starts_with_the_message_alone() -> None:
    assert prompt(session(), CLAUDE, turn(1, None, "hello"), [], []) == ("hello", False)


def test_a_switch_picks_the_harness_own_conversation_and_clears_the_model() -> None:
    s = session(model="claude-sonnet-4-5", harness_session="c1",
                conversations={"claude": Conversation(id="c1", last_turn=1),
                               "codex": Conversation(id="x1", last_turn=0)})  # fmt: skip
    assert switch(s, "codex", None) == {"harness": "codex", "model": None, "fork_from": None,
                                        "harness_session": "x1"}  # fmt: skip
    assert switch(s, "pi", "stub-model")["harness_session"] is None
    assert switch(s, "pi", "stub-model")["model"] == "stub-model"
    assert switch(s, "claude", "claude-opus-4") == {"model": "claude-opus-4"}
    assert switch(s, None, None) == {} and switch(s, "claude", None) == {}
    with pytest.raises(UnknownHarness):
        switch(s, "cursor", None)
    with pytest.raises(InvalidInput):
        switch(s, None, "  ")


def test_checkpoints_carry_the_folders_of_every_harness_with_a_conversation() -> None:
    s = session(harness="codex", conversations={"claude": Conversation(id="c1"),
                                                "pi": Conversation(id="p1")})
    assert conversation_dirs(s) == (".codex/sessions", ".claude/projects", ".pi/agent/sessions")
    assert conversation_dirs(session()) == (".claude/projects",)


def test_a_turn_that_went_well_becomes_its_harness_last() -> None:
    s = session(conversations={"codex": Conversation(id="x1", last_turn=1)})
    done = turn(2, "claude").model_copy(update={"harness_session": "c1"})
    assert after_turn(s, done, "claude") == {"codex": Conversation(id="x1", last_turn=1),
                                             "claude": Conversation(id="c1", last_turn=2)}
