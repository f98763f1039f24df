"""hangar/agent/homeconfig.py run as sandboxes get it (``agent.command("homeconfig", HOME)``):
hangar's settings are merged into a harness's own configuration files, never written over
them, and a file the agent made hostile (a link, a FIFO, garbage) is left as it is, with a
warning, and never makes the merge write anywhere else."""

from __future__ import annotations

import datetime
import json
import os
import stat
import subprocess
import tomllib
from pathlib import Path
from typing import Any

from tests import installed_scripts as scripts
from hangar.agent import tomltext

TRUST = {"projects": {"/workspace/app": {"trust_level": "trusted"}}}
CODEX_SETUP = """\
# written by the environment's setup, as Codex's docs configure a provider
model = "stub-model"
model_provider = "stub"

[model_providers.stub]
name = "the stub"  # an inline comment
base_url = "http://127.0.0.1:9/v1"
wire_api = "responses"
"""


def merge(home: Path, files: dict[str, Any]) -> list[str]:
    """Run the merge over ``home``; its warnings."""
    done = subprocess.run(scripts.command("homeconfig", str(home)),
                          input=json.dumps({"files": files}).encode(), capture_output=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert set(answer) == {"warnings"}
    return list(answer["warnings"])


def test_a_codex_config_written_by_the_setup_keeps_its_provider_and_comments(
    tmp_path: Path,
) -> None:
    config = tmp_path / ".codex" / "config.toml"
    config.parent.mkdir()
    config.write_text(CODEX_SETUP)
    assert merge(tmp_path, {".codex/config.toml": TRUST}) == []
    text = config.read_text()
    assert text.startswith(CODEX_SETUP)  # every byte that was there, comments too
    data = tomllib.loads(text)
    assert data["model_provider"] == "stub" and data["model"] == "stub-model"
    assert data["model_providers"]["stub"]["base_url"] == "http://127.0.0.1:9/v1"
    assert data["projects"] == TRUST["projects"]


def test_a_second_merge_changes_nothing_not_even_the_file(tmp_path: Path) -> None:
    config = tmp_path / ".codex" / "config.toml"
    config.parent.mkdir()
    config.write_text(CODEX_SETUP)
    merge(tmp_path, {".codex/config.toml": TRUST})
    before = config.stat()
    assert merge(tmp_path, {".codex/config.toml": TRUST}) == []
    after = config.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_a_key_of_hangars_with_another_value_is_replaced_and_every_other_key_kept(
    tmp_path: Path,
) -> None:
    config = tmp_path / ".codex" / "config.toml"
    config.parent.mkdir()
    config.write_text(CODEX_SETUP + '\n[projects."/workspace/app"]\ntrust_level = "untrusted"\n'
                      'note = "kept"\n\n[[profiles]]\nname = "a"\nwhen = 1979-05-27T07:32:00Z\n')
    config.chmod(0o640)
    assert merge(tmp_path, {".codex/config.toml": TRUST}) == []
    data = tomllib.loads(config.read_text())
    assert data["projects"]["/workspace/app"] == {"trust_level": "trusted", "note": "kept"}
    assert data["model_providers"]["stub"]["name"] == "the stub"
    assert data["profiles"] == [{"name": "a", "when": datetime.datetime(
        1979, 5, 27, 7, 32, tzinfo=datetime.timezone.utc)}]  # fmt: skip
    assert stat.S_IMODE(config.stat().st_mode) == 0o640


def test_a_missing_file_and_its_folders_are_made_for_the_agent_alone(tmp_path: Path) -> None:
    assert merge(tmp_path, {".codex/config.toml": TRUST, ".pi/agent/models.json":
                            {"providers": {"hangar": {"baseUrl": "http://x/v1"}}}}) == []
    config = tmp_path / ".codex" / "config.toml"
    assert tomllib.loads(config.read_text()) == TRUST
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / ".pi" / "agent").stat().st_mode) == 0o700
    models = json.loads((tmp_path / ".pi" / "agent" / "models.json").read_text())
    assert models == {"providers": {"hangar": {"baseUrl": "http://x/v1"}}}


def test_a_json_file_keeps_the_providers_hangar_did_not_write(tmp_path: Path) -> None:
    models = tmp_path / ".pi" / "agent" / "models.json"
    models.parent.mkdir(parents=True)
    models.write_text(json.dumps({"providers": {"local": {"baseUrl": "http://l/v1"},
                                                "hangar": {"baseUrl": "old", "api": "x"}},
                                  "other": [1, 2]}))  # fmt: skip
    assert merge(tmp_path, {".pi/agent/models.json":
                            {"providers": {"hangar": {"baseUrl": "http://x/v1"}}}}) == []
    assert json.loads(models.read_text()) == {
        "providers": {"local": {"baseUrl": "http://l/v1"},
                      "hangar": {"baseUrl": "http://x/v1", "api": "x"}},
        "other": [1, 2]}  # fmt: skip


def test_a_file_that_does_not_parse_is_left_as_it_is_with_a_warning(tmp_path: Path) -> None:
    config = tmp_path / ".codex" / "config.toml"
    config.parent.mkdir()
    config.write_text("model = [unclosed\n")
    models = tmp_path / ".pi" / "agent" / "models.json"
    models.parent.mkdir(parents=True)
    models.write_text("[1, 2]")
    warnings = merge(tmp_path, {".codex/config.toml": TRUST,
                                ".pi/agent/models.json": {"providers": {}}})  # fmt: skip
    assert len(warnings) == 2
    assert "~/.codex/config.toml was left as it is (it is not valid TOML" in warnings[0]
    assert "~/.pi/agent/models.json was left as it is (it holds a JSON list" in warnings[1]
    assert config.read_text() == "model = [unclosed\n" and models.read_text() == "[1, 2]"


def test_links_are_never_followed_out_of_home(tmp_path: Path) -> None:
    home, outside = tmp_path / "home", tmp_path / "outside"
    home.mkdir()
    outside.mkdir()
    target = outside / "config.toml"
    target.write_text('secret = "kept"\n')
    (home / ".codex").mkdir()
    (home / ".codex" / "config.toml").symlink_to(target)
    (home / ".pi").symlink_to(outside)  # a folder on the way
    warnings = merge(home, {".codex/config.toml": TRUST,
                            ".pi/agent/models.json": {"providers": {}}})  # fmt: skip
    assert "~/.codex/config.toml was left as it is (it is a link" in warnings[0]
    assert "~/.pi was left as it is" not in warnings[1]
    assert "~/.pi/agent/models.json was left as it is (~/.pi is a link" in warnings[1]
    assert target.read_text() == 'secret = "kept"\n'
    assert sorted(os.listdir(outside)) == ["config.toml"]
    assert (home / ".codex" / "config.toml").is_symlink()


def test_a_fifo_in_place_of_the_file_cannot_hold_the_merge_up(tmp_path: Path) -> None:
    (tmp_path / ".codex").mkdir()
    os.mkfifo(tmp_path / ".codex" / "config.toml")
    [warning] = merge(tmp_path, {".codex/config.toml": TRUST})
    assert "it is not a regular file" in warning


def test_a_toml_document_written_whole_parses_back_to_the_same_data() -> None:
    data = {
        "title": 'quotes " and \\ and \x00\x1f\x7f and \n\t and café 🚀',
        "n": -7, "x": 1.5, "big": 1e300, "inf": float("inf"), "yes": True,
        "when": datetime.datetime(2026, 12, 2, 11, 0, 0, 5, tzinfo=datetime.timezone.utc),
        "day": datetime.date(2026, 12, 2), "at": datetime.time(11, 30),
        "list": [1, [2, "three"], {"inline": {"deep": True}}],
        "empty": {},
        "a.b": {"c d": {"e": 1}, "f": []},
        "rows": [{"name": "a"}, {"name": "b", "sub": {"k": 1}}],
    }  # fmt: skip
    assert tomllib.loads(tomltext.dump(data)) == data
