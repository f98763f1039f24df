"""A git tree after every step of a live turn, with the real Claude Code and Codex and the model
stub: the driver writes a signed ``hangar.tree`` line at the turn's start and after each shell
step that changed the working tree, and each step's tree is the tree git makes of the working
tree as it was then (rebuilt after the turn by undoing the later step)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from emulators.model import ModelStub
from hangar.agent import commands
from hangar.harnesses.turns import start_turn
from hangar.processes.runs import wait_run
from tests.harness.conftest import TURN_TIMEOUT, Agent

pytestmark = [pytest.mark.harness, pytest.mark.sandbox]

SCENARIO = {
    "rules": [{"when": "two steps", "steps": [{"shell": "echo one > a.txt"},
                                              {"shell": "echo two > b.txt"},
                                              {"text": "Two steps done."}]}],  # fmt: skip
    "models": ["claude-sonnet-4-5", "gpt-5-codex"],
}
TREE = ("cp -a . /tmp/copy && cd /tmp/copy && {undo} "
        "GIT_INDEX_FILE=/tmp/index git add -A && GIT_INDEX_FILE=/tmp/index git write-tree")


@pytest.fixture(scope="module")
def stub() -> Iterator[ModelStub]:
    with ModelStub(SCENARIO) as running:
        yield running


@pytest.mark.parametrize("agent", ["claude", "codex"], indirect=True)
def test_each_shell_step_leaves_a_signed_tree_line_that_is_the_working_tree_then(
    agent: Agent, stub: ModelStub
) -> None:
    sandbox, _ = agent.engine.sandbox()
    sandboxes = agent.engine.sandboxes
    key, run_id = commands.new_key(), f"run-{uuid.uuid4().hex[:8]}"
    spec = agent.spec("two steps: go", new_id=str(uuid.uuid4()))
    start_turn(sandboxes, sandbox, agent.harness, spec, run_id, key, 2000)
    log, code = wait_run(sandboxes, sandbox, run_id, timeout=TURN_TIMEOUT)
    assert code == 0, log[-2000:]
    trees: list[dict[str, Any]] = []
    for line in log.splitlines():
        if b'"hangar.tree"' in line[:30]:
            fields = commands.verify_event(key, run_id, json.loads(line))
            assert fields is not None, line  # every tree line is the driver's
            trees.append(fields)
    assert [t["step"] for t in trees] == list(range(len(trees)))
    tools = [t["tool"] for t in trees]
    assert tools[0] == "start" and len(tools) == 3, tools  # start, a.txt, b.txt (end: no change)
    assert all(isinstance(t["ms"], (int, float)) and len(t["tree"]) == 40 for t in trees)

    def tree(undo: str) -> str:
        made = sandboxes.exec(sandbox, ["sh", "-c", TREE.format(undo=undo)], cwd=spec.cwd)
        sandboxes.exec(sandbox, ["rm", "-rf", "/tmp/copy", "/tmp/index"])
        assert made.ok, made.stderr
        return made.stdout.decode().strip()

    assert trees[2]["tree"] == tree("")
    assert trees[1]["tree"] == tree("rm b.txt &&")
    assert trees[0]["tree"] == tree("rm a.txt b.txt &&")
