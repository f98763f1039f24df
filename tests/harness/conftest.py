"""Harness tests need the real CLIs, installed by `make harnesses` into HANGAR_HARNESS_DIR.
A missing CLI fails the run with a clear message; these tests never skip."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

CLIS = ("claude", "codex", "pi")


def harness_dir() -> Path:
    """The harness folder, checked to hold every CLI the tests run."""
    root = Path(
        os.environ.get("HANGAR_HARNESS_DIR")
        or Path.home() / ".local" / "share" / "hangar" / "harnesses"
    )
    missing = [c for c in CLIS if not (root / "node_modules" / ".bin" / c).exists()]
    if missing:
        pytest.fail(
            f"harness CLIs {missing} are not installed in {root}: run `make harnesses` "
            "(or `make test`, which installs them)",
            pytrace=False,
        )
    return root
