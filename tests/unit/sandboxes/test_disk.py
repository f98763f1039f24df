"""A local sandbox's disk cap, tried from the agent's side: filling it fails inside the sandbox,
never the host's disk, and hangar's own runs and checkpoints go on working in a full sandbox."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hangar.blobs.local import LocalBlobs
from hangar.config import Settings
from hangar.db.sqlite import SqliteDb
from hangar.processes.runs import start_run, wait_run
from hangar.keys.local import LocalKeys
from hangar.sandboxes import SandboxSpec, SandboxUser
from hangar.sandboxes.local import LocalSandboxes
from hangar.testing.sandboxes import run
from tests.rig import make_engine

pytestmark = pytest.mark.sandbox

CAP = 64 << 20
# Writes as the agent into each of its folders until one fails; prints what failed and how much
# went in altogether.
FILL = """
import errno, os, sys
total = 0
for folder in sys.argv[1:]:
    try:
        with open(os.path.join(folder, "fill"), "wb") as f:
            while True:
                total += f.write(b"x" * (1 << 20))
                f.flush()
    except OSError as exc:
        print(folder, errno.errorcode[exc.errno])
print("total", total)
"""


def loop_devices_under(folder: Path) -> list[str]:
    """The loop devices whose backing file is under ``folder`` (deleted or not)."""
    found = []
    for device in Path("/sys/block").glob("loop*"):
        try:
            backing = (device / "loop" / "backing_file").read_text().strip()
        except OSError:
            continue  # not attached
        if backing.startswith(f"{folder}/"):
            found.append(f"{device.name}: {backing}")
    return found


def until_no_loop_device_under(folder: Path, timeout: float = 10.0) -> None:
    """A sandbox's loop device goes with its last process, a moment after destroy returns."""
    deadline = time.monotonic() + timeout
    while left := loop_devices_under(folder):
        assert time.monotonic() < deadline, f"loop devices left attached: {left}"
        time.sleep(0.02)


def allocated(folder: Path) -> int:
    """Bytes the host's disk holds for the files under ``folder``."""
    return sum(
        os.lstat(os.path.join(dirpath, name)).st_blocks * 512
        for dirpath, _dirs, files in os.walk(folder)
        for name in files
    )


@pytest.fixture
def capped(tmp_path: Path, settings: Settings) -> Iterator[LocalSandboxes]:
    backend = LocalSandboxes.from_url(f"local://{tmp_path}/capped",
                                      settings.replace(sandbox_disk_gb=CAP / 2**30))  # fmt: skip
    yield backend
    for info in backend.list():
        backend.destroy(info.id)
    until_no_loop_device_under(tmp_path)


def test_writing_past_the_disk_cap_fails_inside_the_sandbox_and_not_on_the_host(
    capped: LocalSandboxes, tmp_path: Path
) -> None:
    info = capped.create(SandboxSpec())
    free_before = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    big = capped.exec(info.id, ["fallocate", "-l", "5G", "/tmp/big"])
    assert not big.ok and b"No space left on device" in big.stderr
    # (a fallocate that failed may keep what it got: remove it, then fill every folder)
    filled = run(capped, info.id,
                 f"rm /tmp/big; /usr/bin/python3 -c '{FILL}' /tmp /root /workspace /dev/shm")
    lines = filled.splitlines()
    assert lines[:4] == ["/tmp ENOSPC", "/root ENOSPC", "/workspace ENOSPC", "/dev/shm ENOSPC"]
    total = int(lines[4].split()[1])
    assert CAP * 0.85 < total <= CAP  # the cap, less ext4's own bookkeeping
    # The host holds the volume's blocks and no more; its free space is untouched by the 5 GB.
    assert allocated(capped.root / info.id) <= CAP + (24 << 20)
    free_after = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    assert free_before - free_after < 1 << 30
    # hangar's scratch folder is not on the full volume.
    scratch = capped.exec(info.id, ["sh", "-c", "head -c 8M /dev/zero > /hangar/tmp/x"],
                          user=SandboxUser.HANGAR)  # fmt: skip
    assert scratch.ok, scratch.stderr


def test_a_run_and_a_checkpoint_still_work_when_the_agent_has_filled_its_disk(
    capped: LocalSandboxes, settings: Settings, db: SqliteDb, blobs: LocalBlobs,
    keys: LocalKeys, remote: Path,
) -> None:
    engine = make_engine(settings, db, blobs, keys, capped, remote)
    sandbox_id, workspace = engine.sandbox()
    engine.sh(sandbox_id, "echo work > wip.txt && echo more >> README.md")
    # A conversation of 24 MiB that does not compress: its archive is staged whole.
    engine.sh(sandbox_id, "mkdir -p ~/.claude/projects/app && head -c 24M /dev/urandom > "
                          "~/.claude/projects/app/conv.jsonl")  # fmt: skip
    # The agent uses up its disk's blocks and inodes through a run, which still gets its exit
    # status written.
    fill = "i=0; while : > /tmp/f$i; do i=$((i+1)); done; head -c 1G /dev/zero > /root/x; exit 3"
    start_run(capped, sandbox_id, "fill", ["bash", "-c", fill], cwd="/tmp", env={})
    _, code = wait_run(capped, sandbox_id, "fill", timeout=60, poll=0.05)
    assert code == 3
    for script in ("head -c 1M /dev/zero > /workspace/app/more", ": > /workspace/app/empty"):
        full = capped.exec(sandbox_id, ["sh", "-c", script])
        assert not full.ok and b"No space left on device" in full.stderr
    # hangar's checkpoint of the full sandbox: its staging is not the agent's to fill.
    checkpoint = engine.take(sandbox_id, workspace)
    contents = engine.checkpointer.contents(checkpoint)
    assert contents.has("untracked") and contents.has("wip.patch")
    assert contents.size("agent") >= 24 << 20


def test_a_sandboxs_disk_survives_its_maker_and_destroy_frees_it_and_its_loop_device(
    capped: LocalSandboxes, settings: Settings, tmp_path: Path
) -> None:
    info = capped.create(SandboxSpec())
    run(capped, info.id, "head -c 16M /dev/urandom > /root/kept")
    image = capped.root / info.id / "disk.img"
    assert image.stat().st_size > CAP and loop_devices_under(capped.root / info.id)
    # Another backend on the same folder (a restarted server) finds the same disk, cap and all.
    again = LocalSandboxes.from_url(f"local://{capped.root}",
                                    settings.replace(sandbox_disk_gb=CAP / 2**30))  # fmt: skip
    assert run(again, info.id, "wc -c < /root/kept") == f"{16 << 20}\n"
    assert not again.exec(info.id, ["fallocate", "-l", "1G", "/root/big"]).ok
    again.destroy(info.id)
    assert not (capped.root / info.id).exists()
    until_no_loop_device_under(tmp_path)
