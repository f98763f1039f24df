"""``make package`` ships hangar's bytecode, compiled by the functions' pinned Python with
unchecked hashes, and that interpreter runs it from the unpacked archive instead of compiling
the source: a cold instance pays for no compile, though unpacking gave every file a new mtime.
A function run by another Python (its bytecode unusable) says so in a warning."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "package-functions"
STDLIB_ONLY = ["hangar.cli.commands", "hangar.cli.client", "hangar.inert", "hangar.redact"]
"""Modules of hangar that import only the standard library (besides hangar), which the pinned
interpreter can import without the function's dependencies installed."""


def script() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("package_functions", str(SCRIPT))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The api function's archive, built with the pinned Python's bytecode and unpacked."""
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out)], capture_output=True,
                          text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    with zipfile.ZipFile(out / "api.zip") as archive:
        archive.extractall(out / "api")
    return out / "api"


def pinned_python() -> tuple[str, dict[str, str]]:
    """The pinned interpreter on PATH, and the environment that runs that version."""
    major, minor = script().pinned_python()
    found = shutil.which(f"python{major}.{minor}")
    assert found is not None, f"python{major}.{minor} (Terraform's runtime) is not on PATH"
    return found, {**os.environ, "PYENV_VERSION": f"{major}.{minor}"}


def test_every_module_of_hangar_ships_unchecked_hash_bytecode_for_the_pinned_python(
    unpacked: Path,
) -> None:
    major, minor = script().pinned_python()
    sources = sorted((unpacked / "hangar").rglob("*.py"))
    assert len(sources) > 100
    for source in sources:
        cache = source.parent / "__pycache__" / f"{source.stem}.cpython-{major}{minor}.pyc"
        flags = int.from_bytes(cache.read_bytes()[4:8], "little")
        assert flags == 0b01, cache  # PEP 552: hash-based (bit 0), not checked (bit 1 clear)
    shipped = sorted(unpacked.rglob("*.pyc"))
    assert len(shipped) == len(sources)  # one each, and no other version's
    assert all(p.name.endswith(f".cpython-{major}{minor}.pyc") for p in shipped)


def test_the_pinned_python_runs_the_shipped_bytecode_and_never_compiles_the_source(
    unpacked: Path, tmp_path: Path
) -> None:
    tree = tmp_path / "api"
    shutil.copytree(unpacked, tree)
    # Sources newer than their bytecode, and one that would fail if it were compiled and run.
    for source in (tree / "hangar").rglob("*.py"):
        os.utime(source)
    with open(tree / "hangar" / "cli" / "client.py", "a") as f:
        f.write("\nraise SystemExit('the source was compiled, not the shipped bytecode')\n")
    python, env = pinned_python()
    imports = "; ".join(f"import {name}" for name in STDLIB_ONLY)
    done = subprocess.run(
        [python, "-I", "-v", "-c", f"import sys; sys.path.insert(0, {str(tree)!r}); {imports}"],
        env={**env, "PYTHONDONTWRITEBYTECODE": "1"}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = [line.split("code object from ", 1)[1].strip("'") for line in done.stderr.splitlines()
              if line.startswith("# code object from ") and str(tree) in line]  # fmt: skip
    assert len(loaded) >= len(STDLIB_ONLY)
    assert [path for path in loaded if not path.endswith(".pyc")] == []
    assert re.search(r"hangar/cli/__pycache__/client\.cpython-3\d+\.pyc", "\n".join(loaded))


_ASK = """
import logging, sys
sys.path.insert(0, sys.argv[1])
logging.basicConfig()
from hangar import functions
print(functions.compiled_for_another_python())
"""


def test_a_function_says_when_its_archive_has_no_bytecode_for_the_python_running_it(
    tmp_path: Path,
) -> None:
    out = tmp_path / "dist"
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--python",
                           sys.executable], capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    with zipfile.ZipFile(out / "api.zip") as archive:
        archive.extractall(out / "api")
    shutil.copytree(out / "api", out / "other", ignore=shutil.ignore_patterns("*.pyc"))
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    answers = {}
    for tree in ("api", "other"):
        asked = subprocess.run([sys.executable, "-c", _ASK, str(out / tree)], env=env,
                               capture_output=True, text=True, timeout=60)  # fmt: skip
        assert asked.returncode == 0, asked.stderr
        answers[tree] = (asked.stdout.strip(), "no bytecode for this Python" in asked.stderr)
    assert answers == {"api": ("False", False), "other": ("True", True)}
