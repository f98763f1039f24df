"""How the CLI shows an environment's image: in full by ``env get``, beside its other fields
in ``env list``, and ``(none)`` when it names none."""

from __future__ import annotations

from typing import Any

import pytest

from hangar.cli.render import print_env, print_envs

IMAGE = "registry.example:5000/team/agent:1.2"


def env_view(**fields: Any) -> dict[str, Any]:
    return {"name": "app", "repo": "https://git.example/app.git", "branch": None,
            "setup": None, "vars": [], "secrets": [], "host_ports": [],
            "turn_timeout_minutes": None, "image": None, "warnings": [], **fields}  # fmt: skip


def test_env_get_shows_the_image_or_none(capsys: pytest.CaptureFixture[str]) -> None:
    print_env(env_view(image=IMAGE))
    assert f"  image:      {IMAGE}\n" in capsys.readouterr().out
    print_env(env_view())
    assert "  image:      (none)\n" in capsys.readouterr().out


def test_env_list_shows_an_image_beside_the_other_fields_and_nothing_for_none(
    capsys: pytest.CaptureFixture[str],
) -> None:
    print_envs([env_view(image=IMAGE, vars=["MODE"]), env_view(name="plain")])
    assert capsys.readouterr().out.splitlines() == [
        f"app: https://git.example/app.git  (vars: MODE; image: {IMAGE})",
        "plain: https://git.example/app.git",
    ]
