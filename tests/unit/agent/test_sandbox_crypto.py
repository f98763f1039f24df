"""hangar's ``cryptography`` in a real local sandbox (hangar.agent.toolkit and cryptokit): the
folder ``make sandbox-crypto`` fetched, installed as hangar, sealing from hangar's scripts
exactly as the control plane does, out of the agent's reach, and an unavailable answer with its
reason wherever it cannot work (the trigger of the proxied fallback)."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from hangar import agent
from hangar.agent import toolkit
from hangar.config import Settings
from hangar.sandboxes import SandboxSpec, SandboxUser
from hangar.sandboxes.local import LocalSandboxes
from hangar.testing.sandboxes import run

pytestmark = pytest.mark.sandbox

REPO = Path(__file__).resolve().parents[3]
BUILD = REPO / "build" / "sandbox-crypto"
MACHINE_FOLDER = BUILD / platform.machine()
AGENT, HANGAR = SandboxUser.AGENT, SandboxUser.HANGAR
# A package the agent plants where a careless interpreter would look: it leaves a mark.
PLANTED = "open('/tmp/planted-ran', 'w').write('ran')\nraise ImportError('planted')\n"


@pytest.fixture
def sandbox(sandboxes: LocalSandboxes) -> Iterator[str]:
    """A prepared sandbox (hangar's scripts installed, as Provisioner.prepare leaves it)."""
    info = sandboxes.create(SandboxSpec())
    agent.install(sandboxes, info.id)
    yield info.id


def seal_in_sandbox(sandboxes: LocalSandboxes, sandbox_id: str, key: bytes, nonce: bytes,
                    plain: bytes, aad: bytes, user: SandboxUser = HANGAR,
                    cwd: str | None = None, env: dict[str, str] | None = None,
                    ) -> dict[str, object]:  # fmt: skip
    """``cryptokit probe`` run through the launcher, as ``user``: its answer."""
    given = {"key": key.hex(), "nonce": nonce.hex(), "plain": plain.hex(), "aad": aad.hex()}
    result = agent.run_script(sandboxes, sandbox_id, "cryptokit", "probe", user=user,
                              stdin=json.dumps(given).encode(), cwd=cwd, env=env or {},
                              timeout=60)  # fmt: skip
    assert result.ok, result
    answer = json.loads(result.stdout)
    assert isinstance(answer, dict)
    return answer


def installed_name(settings: Settings) -> str:
    folder = toolkit.crypto_folder(settings)
    assert folder is not None
    return toolkit.crypto_archive(folder).name


def test_the_make_target_fetched_one_folder_per_machine_with_cffi_for_every_python_and_never_committed(
) -> None:  # fmt: skip
    for machine in ("x86_64", "aarch64"):
        folder = BUILD / machine
        assert (folder / "cryptography" / "hazmat" / "primitives" / "ciphers" / "aead.py").is_file()
        backends = sorted(p.name for p in folder.glob("_cffi_backend.*.so"))
        assert backends == sorted(f"_cffi_backend.cpython-3{m}-{machine}-linux-gnu.so"
                                  for m in range(9, 15))  # fmt: skip
        assert not (folder / "cffi").exists()  # cffi's Python files are not needed
    ignored = subprocess.run(["git", "check-ignore", "-q", str(MACHINE_FOLDER)], cwd=REPO)
    assert ignored.returncode == 0


def test_the_make_target_is_idempotent(tmp_path: Path) -> None:
    # Up to date in the repository: make has nothing to do (the venv, which only runs pip
    # when there is something to fetch, is left out of the question).
    up_to_date = ["make", "-q", "-o", ".venv/.installed", "sandbox-crypto"]
    assert subprocess.run(up_to_date, cwd=REPO).returncode == 0
    # The script itself does nothing where its stamp is (no download: the folder stays).
    stamps = list(BUILD.glob(".fetched-*"))
    assert len(stamps) == 1
    (tmp_path / stamps[0].name).touch()
    (tmp_path / "x86_64").mkdir()
    versions = stamps[0].name.removeprefix(".fetched-").split("-")
    done = subprocess.run([str(REPO / ".venv" / "bin" / "python"),
                           str(REPO / "scripts" / "fetch-sandbox-crypto"), str(tmp_path),
                           *versions], capture_output=True, timeout=60)  # fmt: skip
    assert done.returncode == 0 and done.stdout == b""
    assert sorted(p.name for p in tmp_path.iterdir()) == [stamps[0].name, "x86_64"]


def test_after_install_a_hangar_script_seals_and_opens_as_the_control_planes_cryptography(
    sandboxes: LocalSandboxes, sandbox: str, settings: Settings
) -> None:
    first = toolkit.install_crypto(sandboxes, sandbox, settings)
    assert first.available, first.reason
    assert first.version and first.machine == platform.machine()
    again = toolkit.install_crypto(sandboxes, sandbox, settings)  # idempotent
    assert again.available, again.reason
    key, nonce, aad = os.urandom(32), os.urandom(12), b"session/checkpoint"
    plain = os.urandom(256 << 10)
    answer = seal_in_sandbox(sandboxes, sandbox, key, nonce, plain, aad)
    assert answer["available"] is True, answer
    sealed = bytes.fromhex(str(answer["sealed"]))
    assert sealed == AESGCM(key).encrypt(nonce, plain, aad)
    assert AESGCM(key).decrypt(nonce, sealed, aad) == plain
    # Installed once, under its digest, with the launcher's link naming it.
    name = installed_name(settings)
    assert run(sandboxes, sandbox, "readlink /hangar/lib/crypto", user=HANGAR).strip() == name


def test_the_agent_can_neither_list_nor_change_the_installed_folder(
    sandboxes: LocalSandboxes, sandbox: str, settings: Settings
) -> None:
    assert toolkit.install_crypto(sandboxes, sandbox, settings).available
    name = installed_name(settings)
    folder = f"/hangar/lib/{name}"
    attempts = [
        "ls /hangar/lib",
        f"touch {folder}/evil.py",
        f"echo 'raise SystemExit' > {folder}/cryptography/__init__.py",
        f"rm -f {folder}/_cffi_backend.cpython-311-{platform.machine()}-linux-gnu.so",
        f"mv {folder}/cryptography {folder}/gone",
        f"rm -rf {folder}",
        "ln -sfn /tmp /hangar/lib/crypto",
        "rm -f /hangar/lib/crypto",
        "mkdir /hangar/lib/crypto-0000000000000000000",
    ]
    for script in attempts:
        result = sandboxes.exec(sandbox, ["sh", "-c", script], user=AGENT)
        assert not result.ok, (script, result)
    after = toolkit.probe_crypto(sandboxes, sandbox)
    assert after.available, after.reason


def test_the_launcher_never_imports_a_cryptography_of_the_agents(
    sandboxes: LocalSandboxes, sandbox: str, settings: Settings
) -> None:
    planted = ["/root/cryptography", "/tmp/evil/cryptography", "/workspace/cryptography"]
    for path in planted:
        result = sandboxes.exec(sandbox, ["sh", "-c", 'mkdir -p "$1" && cat > "$1/__init__.py"',
                                          "sh", path], stdin=PLANTED.encode(), user=AGENT)
        assert result.ok, result
    env = {"PYTHONPATH": "/tmp/evil", "PYTHONSTARTUP": "/tmp/evil/cryptography/__init__.py"}
    key, nonce = os.urandom(32), os.urandom(12)
    # Not installed: nothing is imported at all, the agent's least of all.
    for user, cwd in ((HANGAR, "/root"), (AGENT, "/root"), (AGENT, "/workspace")):
        answer = seal_in_sandbox(sandboxes, sandbox, key, nonce, b"x", b"", user=user, cwd=cwd,
                                 env=env if user is AGENT else None)  # fmt: skip
        assert answer["available"] is False and "not installed" in str(answer["reason"])
    # Installed: hangar's, from hangar's folder, whoever runs the launcher from wherever.
    assert toolkit.install_crypto(sandboxes, sandbox, settings).available
    for user, cwd in ((HANGAR, "/root"), (AGENT, "/root"), (AGENT, "/workspace")):
        answer = seal_in_sandbox(sandboxes, sandbox, key, nonce, b"x", b"", user=user, cwd=cwd,
                                 env=env if user is AGENT else None)  # fmt: skip
        assert answer["available"] is True, answer
        assert bytes.fromhex(str(answer["sealed"])) == AESGCM(key).encrypt(nonce, b"x", b"")
    assert sandboxes.exec(sandbox, ["test", "-e", "/tmp/planted-ran"]).exit_code == 1


def test_a_sandbox_without_the_folder_is_unavailable_with_the_reason(
    sandboxes: LocalSandboxes, sandbox: str, settings: Settings, tmp_path: Path
) -> None:
    never = toolkit.probe_crypto(sandboxes, sandbox)
    assert not never.available and "not installed in this sandbox" in never.reason
    missing = settings.replace(sandbox_crypto=tmp_path / "no-such-folder")
    answer = toolkit.install_crypto(sandboxes, sandbox, missing)
    assert not answer.available
    assert str(tmp_path / "no-such-folder") in answer.reason and "neither a folder" in answer.reason
    assert sandboxes.exec(sandbox, ["test", "-e", "/hangar/lib/crypto"]).exit_code == 1


def test_a_broken_folder_installs_but_is_unavailable_with_the_import_error(
    sandboxes: LocalSandboxes, sandbox: str, settings: Settings, tmp_path: Path
) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(MACHINE_FOLDER, broken, ignore=shutil.ignore_patterns("_cffi_backend.*"))
    answer = toolkit.install_crypto(sandboxes, sandbox, settings.replace(sandbox_crypto=broken))
    assert not answer.available
    assert "cannot import cryptography's AESGCM" in answer.reason
    assert "_cffi_backend" in answer.reason, answer.reason
    # The working folder, installed after it, takes its place.
    fixed = toolkit.install_crypto(sandboxes, sandbox, settings)
    assert fixed.available, fixed.reason


def test_the_setting_may_name_the_folders_archive_instead_of_the_folder(
    sandboxes: LocalSandboxes, sandbox: str, settings: Settings, tmp_path: Path
) -> None:
    archive = tmp_path / "sandbox-crypto.tar.gz"
    archive.write_bytes(toolkit.crypto_archive(MACHINE_FOLDER).data)
    answer = toolkit.install_crypto(sandboxes, sandbox, settings.replace(sandbox_crypto=archive))
    assert answer.available, answer.reason
    named = run(sandboxes, sandbox, "readlink /hangar/lib/crypto", user=HANGAR).strip()
    assert named == toolkit.crypto_archive(archive).name != installed_name(settings)
