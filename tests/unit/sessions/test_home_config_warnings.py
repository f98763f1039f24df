"""A harness configuration file hangar could not merge its settings into is named in the turn's
warnings, beside what the turn's handback left out, and left as the environment's setup made it.
(The harness here is Codex, which the stand-in world does not have: its turn fails as
harness_missing after the merge.)"""

from __future__ import annotations

import pytest

from hangar.sessions.environments import EnvironmentChange
from tests.unit.sessions.world import World

pytestmark = pytest.mark.sandbox


def test_a_config_file_the_merge_left_as_it_is_is_a_warning_on_the_turn(world: World) -> None:
    service = world.service
    service.environments.update("app", EnvironmentChange(
        setup="mkdir -p ~/.codex && echo 'model = = 1' > ~/.codex/config.toml"))  # fmt: skip
    service.new("demo", "hi", "app", harness="codex", model="m1")
    turn = service.wait("demo", timeout=60, poll=0.05)
    assert turn.finished_at is not None and turn.error_code == "harness_missing", turn
    assert any(w.startswith("~/.codex/config.toml was left as it is (it is not valid TOML")
               for w in turn.warnings), turn.warnings  # fmt: skip
    assert world.sh("demo", "cat ~/.codex/config.toml") == "model = = 1\n"
