"""What keeps local sandboxes apart from the host and from each other: the host uids each one
runs as, and the limits on the agent's processes and memory.

**Uids.** Every sandbox has two host uids of its own, from ``uid_base``: ``base + 2n`` for
hangar's in-sandbox tools (uid 0 inside) and ``base + 2n + 1`` for the agent (uid 1000 inside).
``n`` is the lowest index free on this host, whatever the data folder: :func:`claim_uids` takes
an exclusive ``flock`` on ``/run/hangar/uids/<n>`` and hands the descriptor to the sandbox,
whose init holds it for the sandbox's life (the kernel frees it when the last holder is gone,
so a crash frees it too).

**Limits** bind the agent only (hangar's tools in the same sandbox stay unlimited, so a
checkpoint succeeds during a fork bomb). With ``cgroup`` (cgroup v1 ``pids`` and ``memory``
controllers), the agent's processes go into ``hangar/<sandbox>`` of both: ``pids.max`` counts
threads, ``memory.limit_in_bytes`` all their memory together. With ``rlimit``, each agent
process gets ``RLIMIT_NPROC`` (processes and threads of the agent's uid, which is the sandbox's
alone) and ``RLIMIT_AS`` (address space, *per process*). ``auto`` picks cgroups where both
controllers are usable. cgroup v2 is not used yet: there, ``auto`` means rlimits.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from hangar.errors import InvalidSettings, SandboxError, SandboxUnavailable

UID_LOCKS = Path("/run/hangar/uids")
CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_CONTROLLERS = ("pids", "memory")
CGROUP_PARENT = "hangar"
MAX_INDEX = 4096
INNER_HANGAR = 0
INNER_AGENT = 1000


class LimitsMode(StrEnum):
    AUTO = "auto"
    CGROUP = "cgroup"
    RLIMIT = "rlimit"


@dataclass(frozen=True)
class UidClaim:
    """Sandbox index ``n`` and its two host uids; ``fd`` holds the claim while it is open."""

    index: int
    hangar_uid: int
    agent_uid: int
    fd: int

    def release(self) -> None:
        """Close this process's hold (the sandbox's init keeps its own)."""
        try:
            os.close(self.fd)
        except OSError:
            pass


def uids_for(base: int, index: int) -> tuple[int, int]:
    """(hangar's host uid, the agent's host uid) for sandbox index ``index``."""
    return base + 2 * index, base + 2 * index + 1


def claim_uids(base: int, owner: str, locks: Path = UID_LOCKS) -> UidClaim:
    """Claim the lowest free index on this host. SandboxUnavailable if none is free or the
    lock folder cannot be made."""
    try:
        locks.mkdir(parents=True, exist_ok=True, mode=0o755)
    except OSError as exc:
        raise SandboxUnavailable(f"cannot make {locks}: {exc}", tool="uids") from exc
    for index in range(MAX_INDEX):
        fd = os.open(locks / str(index), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                continue
            raise SandboxError(f"cannot lock {locks / str(index)}: {exc}") from exc
        os.ftruncate(fd, 0)
        os.write(fd, f"{owner}\n".encode())  # who holds it, for people looking
        hangar, agent = uids_for(base, index)
        return UidClaim(index=index, hangar_uid=hangar, agent_uid=agent, fd=fd)
    raise SandboxUnavailable(f"all {MAX_INDEX} sandbox uid pairs on this host are in use",
                             tool="uids")  # fmt: skip


def uids_in_use(locks: Path = UID_LOCKS) -> list[int]:
    """The indexes some live sandbox holds (any data folder), lowest first."""
    held = []
    try:
        names = sorted((n for n in os.listdir(locks) if n.isdigit()), key=int)
    except FileNotFoundError:
        return []
    for name in names:
        try:
            fd = os.open(locks / name, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            held.append(int(name))
        finally:
            os.close(fd)
    return held


@dataclass(frozen=True)
class Limits:
    """The agent's limits in one sandbox: ``mode`` is CGROUP or RLIMIT (never AUTO)."""

    mode: LimitsMode
    max_pids: int
    memory_mb: int

    @property
    def memory_bytes(self) -> int:
        return self.memory_mb * 1024 * 1024


def cgroups_usable(root: Path = CGROUP_ROOT) -> str | None:
    """None when cgroup v1 ``pids`` and ``memory`` can hold hangar's groups here; else why not."""
    for controller in CGROUP_CONTROLLERS:
        folder = root / controller
        if not (folder / "cgroup.procs").exists():
            if (root / "cgroup.controllers").exists():
                return "this machine has cgroup v2, which hangar does not use yet"
            return f"no cgroup v1 {controller} controller at {folder}"
        parent = folder / CGROUP_PARENT
        try:
            parent.mkdir(exist_ok=True)
        except OSError as exc:
            return f"cannot make {parent}: {exc.strerror}"
        if not os.access(parent, os.W_OK):
            return f"{parent} is not writable"
    return None


def resolve_mode(mode: LimitsMode, root: Path = CGROUP_ROOT) -> LimitsMode:
    """The mechanism ``mode`` means here; InvalidSettings when ``cgroup`` is asked for and
    cannot be had."""
    if mode is LimitsMode.RLIMIT:
        return mode
    why = cgroups_usable(root)
    if why is None:
        return LimitsMode.CGROUP
    if mode is LimitsMode.CGROUP:
        raise InvalidSettings(f"HANGAR_SANDBOX_LIMITS=cgroup, but {why}",
                              setting="HANGAR_SANDBOX_LIMITS")  # fmt: skip
    return LimitsMode.RLIMIT


class Cgroups:
    """The cgroup v1 groups of one sandbox: ``<root>/<controller>/hangar/<name>``."""

    def __init__(self, name: str, root: Path = CGROUP_ROOT) -> None:
        self.folders = [root / c / CGROUP_PARENT / name for c in CGROUP_CONTROLLERS]

    @property
    def procs(self) -> list[str]:
        """The files a process writes its pid to, to join the groups."""
        return [str(folder / "cgroup.procs") for folder in self.folders]

    def create(self, limits: Limits, owner_uid: int) -> None:
        """Make the groups with the limits; ``owner_uid`` may move processes into them."""
        pids, memory = self.folders
        try:
            for folder in self.folders:
                folder.mkdir(exist_ok=True)
                for name in ("cgroup.procs", "tasks"):
                    os.chown(folder / name, owner_uid, -1)
            (pids / "pids.max").write_text(str(limits.max_pids))
            (memory / "memory.limit_in_bytes").write_text(str(limits.memory_bytes))
            # No swap here, but where there is, the agent must not swap past its limit.
            memsw = memory / "memory.memsw.limit_in_bytes"
            if memsw.exists():
                memsw.write_text(str(limits.memory_bytes))
        except OSError as exc:
            self.remove()
            raise SandboxError(f"cannot set up the sandbox's cgroups: {exc}") from exc

    def remove(self, timeout: float = 10.0) -> None:
        """Remove the groups once their processes are gone (killed ones take a moment)."""
        deadline = time.monotonic() + timeout
        for folder in self.folders:
            pause = 0.001
            while True:
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                        raise SandboxError(f"cannot remove cgroup {folder}: {exc}") from exc
                    time.sleep(pause)
                    pause = min(pause * 2, 0.05)
