"""A harness's settings merged into its configuration files in a real sandbox, as the agent
(:func:`hangar.harnesses.turns.write_home_files`): what the environment put there stays, and a
file the agent made a link to hangar's own folder is left as it is, with a warning, never
written through."""

from __future__ import annotations

import tomllib

import pytest

from hangar.harnesses import TurnSpec, get_harness
from hangar.harnesses.turns import write_home_files
from hangar.sandboxes import SandboxSpec, SandboxUser
from hangar.sandboxes.local import LocalSandboxes

pytestmark = pytest.mark.sandbox

SPEC = TurnSpec("go", "/workspace/app", model="m1", env={"OPENAI_BASE_URL": "http://h/v1"})


def sh(sandboxes: LocalSandboxes, sandbox: str, script: str) -> str:
    done = sandboxes.exec(sandbox, ["sh", "-c", script])
    assert done.ok, done.stderr
    return done.stdout.decode()


def test_the_environments_codex_provider_and_pi_models_stay_beside_hangars_settings(
    sandboxes: LocalSandboxes,
) -> None:
    sandbox = sandboxes.create(SandboxSpec()).id
    sh(sandboxes, sandbox, "mkdir -p ~/.codex ~/.pi/agent && printf '%s\\n' "
       "'model_provider = \"mine\"' '[model_providers.mine]' 'base_url = \"http://m/v1\"' "
       "> ~/.codex/config.toml && echo '{\"providers\": {\"mine\": {\"api\": \"x\"}}}' "
       "> ~/.pi/agent/models.json")  # fmt: skip
    assert write_home_files(sandboxes, sandbox, get_harness("codex"), SPEC) == []
    assert write_home_files(sandboxes, sandbox, get_harness("pi"), SPEC) == []
    config = tomllib.loads(sh(sandboxes, sandbox, "cat ~/.codex/config.toml"))
    assert config["model_provider"] == "mine"
    assert config["model_providers"]["mine"]["base_url"] == "http://m/v1"
    assert config["projects"]["/workspace/app"] == {"trust_level": "trusted"}
    models = sh(sandboxes, sandbox, "cat ~/.pi/agent/models.json")
    assert '"mine"' in models and '"hangar"' in models
    owner = sh(sandboxes, sandbox, "stat -c %U:%a ~/.codex/config.toml ~/.pi/agent/models.json")
    agent = sh(sandboxes, sandbox, "id -un").strip()
    assert owner.split() == [f"{agent}:644", f"{agent}:644"]  # as the setup made them


def test_a_config_file_linked_to_hangars_folder_is_left_alone_with_a_warning(
    sandboxes: LocalSandboxes,
) -> None:
    sandbox = sandboxes.create(SandboxSpec()).id
    before = sandboxes.exec(sandbox, ["cat", "/hangar/sandbox.json"], user=SandboxUser.HANGAR)
    sh(sandboxes, sandbox, "mkdir -p ~/.codex && ln -s /hangar/sandbox.json ~/.codex/config.toml")
    [warning] = write_home_files(sandboxes, sandbox, get_harness("codex"), SPEC)
    assert warning.startswith("~/.codex/config.toml was left as it is (it is a link")
    after = sandboxes.exec(sandbox, ["cat", "/hangar/sandbox.json"], user=SandboxUser.HANGAR)
    assert after.stdout == before.stdout
    assert sh(sandboxes, sandbox, "readlink ~/.codex/config.toml") == "/hangar/sandbox.json\n"


def test_a_config_file_that_does_not_parse_is_left_as_it_is_with_a_warning(
    sandboxes: LocalSandboxes,
) -> None:
    sandbox = sandboxes.create(SandboxSpec()).id
    sh(sandboxes, sandbox, "mkdir -p ~/.codex && echo 'model = = 1' > ~/.codex/config.toml")
    [warning] = write_home_files(sandboxes, sandbox, get_harness("codex"), SPEC)
    assert "it is not valid TOML" in warning
    assert sh(sandboxes, sandbox, "cat ~/.codex/config.toml") == "model = = 1\n"
