"""``make package`` ships hangar's bytecode, compiled by the functions' pinned Python with
unchecked hashes, and that interpreter runs it from the unpacked archive instead of compiling
the source: a cold instance pays for no compile, though unpacking gave every file a new mtime.
A function run by another Python (its bytecode unusable) says so in a warning. It ships the
sandboxes' ``cryptography`` too, where the deployed function finds it without the repository."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import io
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from types import ModuleType

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from hangar.agent import toolkit

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


def packaged_crypto(zip_path: Path) -> dict[str, zipfile.ZipInfo]:
    with zipfile.ZipFile(zip_path) as archive:
        return {info.filename: info for info in archive.infolist()
                if info.filename.startswith("sandbox-crypto/")}  # fmt: skip


def test_each_function_carries_the_cryptography_archive_for_x86_64_sandboxes_by_default(
    unpacked: Path,
) -> None:
    expected = toolkit.crypto_archive(ROOT / "build" / "sandbox-crypto" / "x86_64").data
    for function in ("api", "ticks"):
        zip_path = unpacked.parent / f"{function}.zip"
        found = packaged_crypto(zip_path)
        assert sorted(found) == ["sandbox-crypto/x86_64.tar.gz"]
        info = found["sandbox-crypto/x86_64.tar.gz"]
        assert info.date_time == script().STAMP and info.compress_type == zipfile.ZIP_STORED
        with zipfile.ZipFile(zip_path) as archive:
            assert archive.read(info) == expected  # the bytes the control plane would send
    assert (unpacked / "sandbox-crypto" / "x86_64.tar.gz").read_bytes() == expected


_SEAL = """
import sys
sys.path.append(sys.argv[1])
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
import cryptography
assert cryptography.__file__.startswith(sys.argv[1]), cryptography.__file__
key, nonce, plain = bytes(range(32)), bytes(12), sys.stdin.buffer.read()
sys.stdout.write(AESGCM(key).encrypt(nonce, plain, b"aad").hex())
"""


def test_the_packaged_archive_for_each_machine_asked_unpacks_to_a_cryptography_an_isolated_python_seals_with(
    tmp_path: Path,
) -> None:  # fmt: skip
    made = []
    for out in (tmp_path / "one", tmp_path / "two"):
        done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--python",
                               sys.executable, "--sandbox-machine", "aarch64",
                               "--sandbox-machine", "x86_64"], capture_output=True,
                              text=True)  # fmt: skip
        assert done.returncode == 0, done.stderr
        made.append((out / "api.zip").read_bytes())
    assert made[0] == made[1]  # reproducible, archives and all
    found = packaged_crypto(tmp_path / "one" / "api.zip")
    assert sorted(found) == ["sandbox-crypto/aarch64.tar.gz", "sandbox-crypto/x86_64.tar.gz"]
    with zipfile.ZipFile(tmp_path / "one" / "api.zip") as archive:
        data = archive.read(f"sandbox-crypto/{platform.machine()}.tar.gz")
    folder = tmp_path / "crypto"
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(folder, filter="data")
    python = shutil.which("python3")
    assert python is not None
    plain = os.urandom(4096)
    done = subprocess.run([python, "-I", "-S", "-c", _SEAL, str(folder)], input=plain,
                          capture_output=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert bytes.fromhex(done.stdout.decode()) == AESGCM(bytes(range(32))).encrypt(
        bytes(12), plain, b"aad")


_FIND = """
import json, sys
sys.path.insert(0, sys.argv[1])
import hangar
from hangar.agent import toolkit
from hangar.config import Settings
folder = toolkit.crypto_folder(Settings())
print(json.dumps({"hangar": hangar.__file__, "folder": str(folder),
                  "name": toolkit.crypto_archive(folder).name if folder else None}))
"""


def test_a_deployed_function_finds_the_packaged_archive_without_the_repositorys_build_folder(
    unpacked: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "HANGAR_SANDBOX_CRYPTO"}
    done = subprocess.run([sys.executable, "-I", "-B", "-c", _FIND, str(unpacked)], env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout)
    assert answer["hangar"] == str(unpacked / "hangar" / "__init__.py")
    assert not (unpacked.parent / "build").exists()
    packaged = unpacked / "sandbox-crypto" / "x86_64.tar.gz"
    assert answer["folder"] == str(packaged)
    assert answer["name"] == toolkit.crypto_archive(packaged).name
    assert toolkit.packaged_archive(root=unpacked) == packaged
