"""Environments through the CLI and a real server: read back, changed field by field, and not
deleted from under the sessions that use them unless forced."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.conftest import Cli, Server
from tests.cli.test_cli import identity, one_error_line


def env_json(cli: Cli, name: str) -> dict[str, object]:
    code, out, err = cli("env", "get", name, "--json")
    assert code == 0, err
    return dict(json.loads(out))


def test_env_update_changes_only_the_fields_given(server: Server, cli: Cli, remote: Path) -> None:
    assert cli("env", "add", "app", "--repo", str(remote), "--setup", "make deps",
               "--var", "MODE=slow", "--secret", "TOKEN=t0p-secret", "--host-port", "8787")[0] == 0
    before = env_json(cli, "app")
    code, out, _ = cli("env", "get", "app")
    assert code == 0 and "make deps" in out and "TOKEN" in out and "t0p-secret" not in out

    code, out, err = cli("env", "update", "app", "--var", "MODE=fast")
    assert (code, err) == (0, "") and "vars:       MODE" in out
    after = env_json(cli, "app")
    assert {k: v for k, v in after.items() if k != "vars"} == {
        k: v for k, v in before.items() if k != "vars"}  # fmt: skip

    code, _, _ = cli("env", "update", "app", "--setup", "", "--unset", "TOKEN",
                     "--no-host-ports", "--branch", "main")  # fmt: skip
    changed = env_json(cli, "app")
    assert code == 0 and (changed["setup"], changed["secrets"], changed["host_ports"],
                          changed["branch"]) == (None, [], [], "main")  # fmt: skip
    assert changed["vars"] == ["MODE"] and changed["repo"] == str(remote)


def test_env_update_refuses_bad_changes_and_changes_nothing(
    server: Server, cli: Cli, remote: Path
) -> None:
    assert cli("env", "add", "app", "--repo", str(remote), "--var", "MODE=slow")[0] == 0
    before = env_json(cli, "app")
    cases = [
        (("--branch", "no-such-branch"), "invalid_input", "no branch"),
        (("--unset", "NOPE"), "invalid_input", "NOPE"),
        (("--var", "MODE=x", "--unset", "MODE"), "invalid_input", "both set and unset"),
        (("--var", "1BAD=x"), "invalid_input", "1BAD"),
    ]
    for args, code_name, said in cases:
        code, _, err = cli("env", "update", "app", *args)
        assert code == 1 and said in one_error_line(err, code_name), (args, err)
    code, _, err = cli("env", "update", "app")
    assert code == 2 and "nothing to change" in one_error_line(err, "usage")
    code, _, err = cli("env", "update", "ghost", "--var", "A=b")
    assert code == 1 and "ghost" in one_error_line(err, "environment_not_found")
    assert env_json(cli, "app") == before


@pytest.mark.sandbox
def test_an_environment_in_use_is_deleted_only_by_force_and_its_changes_reach_the_next_turn(
    server: Server, cli: Cli, remote: Path
) -> None:
    assert cli("env", "add", "app", "--repo", str(remote), *identity(),
               "--var", "GREETING=hello")[0] == 0  # fmt: skip
    code, out, err = cli("session", "new", "user", "run: echo $GREETING", "--env", "app",
                         "--harness", "antigravity", "-w")  # fmt: skip
    assert code == 0, err
    assert cli("env", "update", "app", "--var", "GREETING=bonjour")[0] == 0
    code, _, err = cli("session", "send", "user", "run: echo $GREETING > said.txt", "-w")
    assert code == 0, err
    assert cli("session", "shell", "user", "--", "cat", "said.txt")[1] == "bonjour\n"

    code, _, err = cli("env", "delete", "app")
    assert code == 1 and "user" in one_error_line(err, "environment_in_use")
    assert env_json(cli, "app")["name"] == "app"
    assert cli("session", "delete", "user")[0] == 0
    assert cli("env", "delete", "app") == (0, "deleted environment app\n", "")


def test_env_add_and_update_with_an_image_are_refused_on_the_local_backend_changing_nothing(
    server: Server, cli: Cli, remote: Path
) -> None:
    image = "registry.example:5000/team/agent:1.2"
    code, _, err = cli("env", "add", "app", "--repo", str(remote), "--image", image)
    line = one_error_line(err, "sandbox_capability_missing")
    assert code == 1 and f"environment app would name image {image}" in line
    assert "runs no container images" in line
    assert cli("env", "list")[1] == "no environments\n"

    assert cli("env", "add", "app", "--repo", str(remote), "--var", "MODE=slow")[0] == 0
    before = env_json(cli, "app")
    assert before["image"] is None and "image:      (none)" in cli("env", "get", "app")[1]
    code, _, err = cli("env", "update", "app", "--image", image, "--var", "MODE=fast")
    assert code == 1 and image in one_error_line(err, "sandbox_capability_missing")
    code, _, err = cli("env", "update", "app", "--image", "Team/Agent")
    assert code == 1 and "must be lowercase" in one_error_line(err, "invalid_input")
    code, _, err = cli("env", "update", "app", "--image", image, "--no-image")
    assert code == 2 and "not allowed with" in err
    assert cli("env", "update", "app", "--no-image")[0] == 0
    assert env_json(cli, "app") == before


def test_a_warm_pool_is_refused_on_the_local_backend_as_a_gke_feature_changing_nothing(
    server: Server, cli: Cli, remote: Path
) -> None:
    code, _, err = cli("env", "add", "app", "--repo", str(remote), "--warm-pool", "1")
    line = one_error_line(err, "invalid_input")
    assert code == 1 and "a warm pool is a GKE feature" in line
    assert cli("env", "list")[1] == "no environments\n"
    assert cli("env", "add", "app", "--repo", str(remote))[0] == 0
    before = env_json(cli, "app")
    code, _, err = cli("env", "update", "app", "--warm-pool", "2", "--var", "MODE=fast")
    assert code == 1 and "GKE feature" in one_error_line(err, "invalid_input")
    assert env_json(cli, "app") == before


def test_warm_pool_hours_round_trip_through_the_cli_and_rest_in_their_canonical_spelling(
    server: Server, cli: Cli, remote: Path
) -> None:
    code, _, err = cli("env", "add", "app", "--repo", str(remote), "--warm-pool-hours",
                       "mon-fri 08:00-20:00; sat 10:00-14:00 america/new_york")  # fmt: skip
    assert code == 0, err
    hours = "Mon-Fri 08:00-20:00; Sat 10:00-14:00 America/New_York"
    env = env_json(cli, "app")
    assert (env["warm_pool"], env["warm_pool_hours"]) == (0, hours)
    assert "warm pool:  (none)" in cli("env", "get", "app")[1]
    code, _, err = cli("env", "update", "app", "--warm-pool-hours", "Mon 25:00-26:00 UTC")
    assert code == 1 and "warm_pool_hours" in one_error_line(err, "invalid_input")
    assert env_json(cli, "app")["warm_pool_hours"] == hours
    code, _, err = cli("env", "update", "app", "--warm-pool-hours", "Mon 08:00-09:00 UTC",
                       "--no-warm-pool-hours")  # fmt: skip
    assert code == 2 and "not allowed with" in err
    assert cli("env", "update", "app", "--no-warm-pool-hours")[0] == 0
    assert env_json(cli, "app")["warm_pool_hours"] is None
