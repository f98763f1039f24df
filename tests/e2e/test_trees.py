"""A turn's steps over the CLI against a real ``hangar serve``, with the real Claude Code and the
model stub: ``session get`` lists each step's tool and tree; ``session tree NAME TURN STEP``
shows a step's patch against the turn's start, after the sandbox is gone too."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from emulators.model import ModelStub
from tests.e2e.conftest import Server
from tests.e2e.test_acceptance import MODELS, add_env, get
from tests.harness.test_trees import SCENARIO

pytestmark = [pytest.mark.sandbox, pytest.mark.e2e, pytest.mark.harness]


@pytest.fixture
def backends() -> dict[str, str]:
    """The surfaces are the same over every backend: the embedded ones are enough here."""
    return {}


@pytest.fixture
def stub() -> Iterator[ModelStub]:
    with ModelStub(SCENARIO) as running:
        yield running


def test_each_steps_patch_is_shown_days_later_without_the_sandbox(
    real_server: Server, remote: Path, stub: ModelStub
) -> None:
    server = real_server
    add_env(server, remote, stub)
    server.ok("session", "new", "steps", "two steps: go", "--env", "app", "--harness", "claude",
              "--model", MODELS["claude"], "-w")  # fmt: skip
    (turn,) = get(server, "steps")["turns"]
    assert [s["tool"] for s in turn["steps"]] == ["start", "Bash", "Bash"]
    assert "hangar session tree steps 1 1" in server.ok("session", "get", "steps")
    server.ok("session", "suspend", "steps")  # the sandbox goes: the steps stay
    first = server.ok("session", "tree", "steps", "1", "1")
    assert "a.txt" in first and "+one" in first and "b.txt" not in first
    both = json.loads(server.ok("session", "tree", "steps", "1", "2", "--json"))
    assert both["encoding"] == "utf-8" and "+two" in both["patch"] and "+one" in both["patch"]
    assert both["tree"] == turn["steps"][2]["tree"] and not both["cut"]
    start = json.loads(server.ok("session", "tree", "steps", "1", "0", "--json"))
    assert start["patch"] == ""
    missing = server.cli("session", "tree", "steps", "1", "9")
    assert missing.returncode == 1 and "(invalid_input)" in missing.stderr, missing.stderr
    sealed = [p for p in server.data_dir.rglob("steps") if p.is_file()]
    assert sealed, "the steps were not kept in the blobs"
    server.ok("session", "delete", "steps")
    assert not [p for p in server.data_dir.rglob("steps") if p.is_file()]  # gone with it
