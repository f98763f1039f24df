"""hangar's ``cryptography`` for the in-sandbox scripts, from the control plane's side: the
folder, its archive, its install into a sandbox and the probe that says whether the sandbox's
``python3`` can seal with it (the sandbox's side is :mod:`hangar.agent.cryptokit`).

The standard library has no AES-GCM and an image promises only ``python3``, ``git`` and
``tar``, so a sandbox that seals its own checkpoints gets ``cryptography`` from hangar: the
wheel built for the stable ABI (one for every CPython from 3.9 on, manylinux, glibc 2.17 and
later) and cffi's ``_cffi_backend`` extension for each CPython minor 3.9 to 3.14, in one folder
(``make sandbox-crypto`` fetches it into ``build/sandbox-crypto/<machine>``; about 17 MB, 5.4 MB
as the archive; ``make package`` ships the archive in each function's source, see
:func:`packaged_archive`). :func:`install_crypto` puts it at ``/hangar/lib/crypto-<digest>``
(named by its content, like the scripts' folder beside it) and the launcher puts it on the
scripts' ``sys.path``. It costs the sandbox one exec and the archive's bytes, so it is made
only for sandboxes that will seal checkpoints themselves, never for every sandbox. Where a sandbox
cannot use it (a musl image, a Python older than 3.9, another machine, no folder on the control
plane), the answer is unavailable with the reason, and that sandbox's checkpoints go through the
control plane.
"""

from __future__ import annotations

import functools
import hashlib
import io
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hangar import agent

if TYPE_CHECKING:
    from hangar.config import Settings
    from hangar.sandboxes import ExecResult, Sandboxes

INSTALL_TIMEOUT = 120.0
PROBE_TIMEOUT = 60.0
_REPO_BUILD = Path(__file__).resolve().parents[3] / "build" / "sandbox-crypto"
SANDBOX_MACHINE = "x86_64"
"""The sandboxes' machine where nothing names another: GKE's default node pools, and what
``scripts/package-functions`` ships unless told otherwise."""


class CryptoProbe(BaseModel):
    """Whether a sandbox's scripts can seal with AES-GCM (the probe's answer, untrusted: a
    sandbox that says yes and then cannot seal fails its direct checkpoint, which records
    nothing). ``reason`` says why not; ``python``, ``machine`` and ``version`` (cryptography's)
    are the sandbox's, where it answered; ``sealed`` the probe's input as it sealed it (hex)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    available: bool
    reason: str = ""
    python: str = ""
    machine: str = ""
    version: str = ""
    sealed: str = Field(default="", repr=False)


@dataclass(frozen=True)
class CryptoArchive:
    """The folder as ``cryptokit install`` reads it: ``name`` is ``crypto-<digest>``, the
    digest of every file's path and bytes; ``data`` a gzipped tar of them."""

    name: str
    data: bytes


def crypto_folder(settings: Settings) -> Path | None:
    """The folder to install: ``HANGAR_SANDBOX_CRYPTO`` when set, else the first there of the
    repository's ``build/sandbox-crypto/<this machine>`` (a checkout, where the local backend's
    sandboxes run on this machine) and :func:`packaged_archive` (a deployed function, whose
    source has no ``build``); None when none is. Either may be the folder's archive instead, a
    ``.tar.gz`` file holding :func:`crypto_archive`'s bytes (what a deployment without the
    repository ships: 5.4 MB instead of 17). Looked up on each call, never at import."""
    for folder in _candidates(settings):
        if folder.is_dir() or (folder.name.endswith(".tar.gz") and folder.is_file()):
            return folder
    return None


def packaged_archive(machine: str = SANDBOX_MACHINE, root: Path | None = None) -> Path:
    """Where ``scripts/package-functions`` puts the archive for sandboxes on ``machine``:
    ``sandbox-crypto/<machine>.tar.gz`` in ``root``, the folder that holds the ``hangar``
    package (default: this hangar's, from ``hangar.__file__``: a function's unpacked source).
    The path only; it need not exist."""
    if root is None:
        import hangar

        root = Path(hangar.__file__).resolve().parent.parent
    return root / "sandbox-crypto" / f"{machine}.tar.gz"


def _candidates(settings: Settings) -> list[Path]:
    if settings.sandbox_crypto is not None:
        return [settings.sandbox_crypto]
    return [_REPO_BUILD / platform.machine(), packaged_archive()]


@functools.cache
def crypto_archive(folder: Path) -> CryptoArchive:
    """The archive of ``folder`` (regular files and folders, ``__pycache__`` left out; files
    0644, folders 0755, fixed times: the same bytes for the same files). Read once per process
    and folder. A ``.tar.gz`` file is taken as such an archive already, named by the digest
    of its bytes. OSError if it cannot be read."""
    import gzip
    import tarfile

    if folder.is_file():
        data = folder.read_bytes()
        return CryptoArchive(f"crypto-{hashlib.sha256(data).hexdigest()[:20]}", data)

    files = sorted(p for p in folder.rglob("*") if "__pycache__" not in p.parts
                   and p.is_file() and not p.is_symlink())  # fmt: skip
    folders = sorted({p.relative_to(folder).parent.as_posix() for p in files} - {"."})
    h = hashlib.sha256()
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name in _with_parents(folders):
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 1 << 30
            tar.addfile(info)
        for path in files:
            name, data = path.relative_to(folder).as_posix(), path.read_bytes()
            h.update(f"{name}\0{len(data)}\0".encode() + data)
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 1 << 30
            tar.addfile(info, io.BytesIO(data))
    data = gzip.compress(raw.getvalue(), compresslevel=6, mtime=0)
    return CryptoArchive(f"crypto-{h.hexdigest()[:20]}", data)


def _with_parents(folders: list[str]) -> list[str]:
    every = {"/".join(f.split("/")[:i]) for f in folders for i in range(1, f.count("/") + 2)}
    return sorted(every)


def install_crypto(sandboxes: Sandboxes, sandbox_id: str, settings: Settings) -> CryptoProbe:
    """Install the folder (:func:`crypto_folder`) in the sandbox as hangar and probe it: one
    exec to install (none when the control plane has no folder) and one to probe. Idempotent
    (a second install of the same folder unpacks nothing). Call it once a sandbox is prepared
    (:meth:`hangar.sessions.sandbox.Provisioner.prepare`) and only when its checkpoints will be
    direct; an unavailable answer means that sandbox's checkpoints go through the control
    plane. Raises what ``exec`` raises (SandboxError: the sandbox is gone)."""
    from hangar.sandboxes import SandboxUser

    folder = crypto_folder(settings)
    if folder is None:
        where = " or ".join(str(p) for p in _candidates(settings))
        return CryptoProbe(available=False, reason="the control plane has no cryptography for "
                           f"sandboxes: neither a folder nor its .tar.gz at {where} (make "
                           "sandbox-crypto fetches it, make package ships it; "
                           "HANGAR_SANDBOX_CRYPTO names another)")  # fmt: skip
    try:
        archive = crypto_archive(folder)
    except OSError as exc:
        return CryptoProbe(available=False, reason=f"cannot read {folder}: {exc}")
    result = agent.run_script(sandboxes, sandbox_id, "cryptokit", "install", archive.name,
                              stdin=archive.data, user=SandboxUser.HANGAR,
                              timeout=INSTALL_TIMEOUT)  # fmt: skip
    if not result.ok:
        return CryptoProbe(available=False, reason="cannot install cryptography in the "
                           f"sandbox: {_tail(result)}")  # fmt: skip
    return probe_crypto(sandboxes, sandbox_id)


def probe_crypto(sandboxes: Sandboxes, sandbox_id: str) -> CryptoProbe:
    """Whether hangar's scripts in the sandbox can seal with AES-GCM (``cryptokit probe``, one
    exec as hangar): a fresh random key, nonce and input go in, and the sandbox's sealed bytes
    must be exactly those the control plane's own ``cryptography`` makes. Unavailable with the
    reason when nothing is installed, the import fails or the bytes differ. Raises what
    ``exec`` raises."""
    import json
    import secrets

    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from hangar.sandboxes import SandboxUser

    key, nonce, plain, aad = (secrets.token_bytes(n) for n in (32, 12, 4096, 16))
    given = {"key": key.hex(), "nonce": nonce.hex(), "plain": plain.hex(), "aad": aad.hex()}
    result = agent.run_script(sandboxes, sandbox_id, "cryptokit", "probe",
                              stdin=json.dumps(given).encode(), user=SandboxUser.HANGAR,
                              timeout=PROBE_TIMEOUT)  # fmt: skip
    if not result.ok:
        return CryptoProbe(available=False, reason=f"the probe failed: {_tail(result)}")
    try:
        answer = CryptoProbe.model_validate_json(result.stdout.strip().splitlines()[-1])
    except (IndexError, ValidationError):
        return CryptoProbe(available=False, reason="the probe's answer is not readable: "
                           f"{result.stdout[-200:]!r}")  # fmt: skip
    if answer.available and answer.sealed != AESGCM(key).encrypt(nonce, plain, aad).hex():
        return answer.model_copy(update={"available": False, "reason": "the sandbox sealed "
                                         "other bytes than the control plane's cryptography"})
    return answer


def _tail(result: ExecResult) -> str:
    text = result.stderr.decode(errors="replace").strip()
    return f"status {result.exit_code}: {text[-300:]}" if text else f"status {result.exit_code}"

