"""``hangar doctor`` on HANGAR_PREBUILD_ENVIRONMENTS: a name that is no environment of the
server is a warning (never a failure: ``hangar serve`` starts all the same)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hangar.cli.doctor.machine import prebuilt
from hangar.cli.doctor.report import Report
from hangar.config import Settings


def _settings(tmp_path: Path, names: str) -> Settings:
    return Settings.build(data_dir=tmp_path, harness_dir=tmp_path, prebuild_environments=names)


def test_a_prebuilt_name_that_is_no_environment_is_a_warning_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = Report()
    prebuilt(report, _settings(tmp_path, "app, nosuch"), {"app", "other"})
    out = capsys.readouterr().out
    assert out.startswith("WARN") and "names no environment nosuch" in out
    assert "app" not in out.split("environment", 1)[1].split(":")[0]
    assert not report.failed


def test_prebuilt_names_that_all_exist_or_all_are_fine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prebuilt(Report(), _settings(tmp_path, "app"), {"app"})
    assert capsys.readouterr().out.startswith("OK")
    prebuilt(Report(), _settings(tmp_path, "all"), set())
    prebuilt(Report(), _settings(tmp_path, ""), set())
    assert capsys.readouterr().out == ""
