"""What ``hangar doctor`` tells a person to do is what happens: ``make harnesses`` installs the
CLIs it is said to, and the key file appears when the doctor says it will."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hangar.cli.doctor import machine
from hangar.cli.doctor.report import Report
from tests.cli.conftest import Cli, Server

MAKEFILE = Path(__file__).parents[2] / "Makefile"


def makefile_harness_packages() -> set[str]:
    """The npm package names in the Makefile's HARNESS_PACKAGES (versions dropped)."""
    text = MAKEFILE.read_text().replace("\\\n", " ")
    [value] = re.findall(r"^HARNESS_PACKAGES :=(.*)$", text, re.M)
    return {spec.rsplit("@", 1)[0] for spec in value.split()}


def test_a_missing_antigravity_cli_is_not_sent_to_make_harnesses_which_cannot_install_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert makefile_harness_packages() == {
        "@anthropic-ai/claude-code", "@openai/codex", "@mariozechner/pi-coding-agent"}  # fmt: skip
    machine.harnesses(Report(), tmp_path)
    lines = {line.split(":")[0].split()[-1]: line for line in capsys.readouterr().out.splitlines()
             if line.split()[1] == "harness"}  # fmt: skip
    for harness in ("claude", "codex", "pi"):
        assert lines[harness].startswith("WARN"), lines
        assert lines[harness].endswith("(make harnesses installs it)"), lines
    antigravity = lines["antigravity"]
    assert antigravity.startswith("INFO") and "make harnesses installs it" not in antigravity
    assert "make harnesses installs only Claude Code, Codex and pi" in antigravity
    assert f"put an agy binary in {tmp_path}/bin" in antigravity


def test_the_key_file_is_made_when_hangar_first_seals_something_as_the_doctor_says(
    server: Server, cli: Cli, monkeypatch: pytest.MonkeyPatch, remote: Path
) -> None:
    monkeypatch.setenv("HANGAR_HARNESS_DIR", str(server.data_dir.parent / "harnesses"))
    key = server.data_dir / "vault.key"
    assert not key.exists()  # hangar serve has started: no key file yet
    _, out, _ = cli("doctor")
    [said] = [line for line in out.splitlines() if line.split()[1] == "keys"]
    assert said.startswith("INFO") and f"{key} does not exist yet" in said
    assert "the first time it seals something" in said and "not at start" in said
    assert "on first start" not in said

    code, _, err = cli("env", "add", "app", "--repo", str(remote), "--secret", "TOKEN=s3cret")
    assert code == 0, err
    assert key.stat().st_size == 32
    _, out, _ = cli("doctor")
    [said] = [line for line in out.splitlines() if line.split()[1] == "keys"]
    assert said.startswith("OK") and "wrapped and unwrapped" in said
