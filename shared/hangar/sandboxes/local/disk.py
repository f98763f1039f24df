"""A local sandbox's disk: everything the sandbox can write is on a filesystem of its own.

**The volume.** Each sandbox gets a sparse file, ``<folder>/disk.img``, holding an ext4
filesystem of ``HANGAR_SANDBOX_DISK_GB``. The launcher attaches it to a loop device (with
autoclear) and mounts it inside its own private mount namespace only: the host's mount table
never shows it, and the kernel unmounts it and frees the loop device by itself once the
sandbox's last process has ended. So a restart of ``hangar serve`` changes nothing (the mount
belongs to the sandbox, not to the server), the loop device lives exactly as long as the
sandbox's processes (a crash of hangar leaks none), and destroy frees the space by removing the
folder, file included. Everything the agent can write lives on
it: HOME, ``/workspace``, ``/tmp``, ``/dev/shm`` and ``/hangar`` (its runs' logs take the
agent's output). Past the cap, writes fail inside the sandbox with ENOSPC; the host's disk only
ever holds the blocks written (the file is sparse), at most the cap and hangar's share.

**hangar's share.** On top of the cap, 1% of it (8 MiB at least) is ext4's reserved blocks,
which only hangar's host uid (``resuid``/``resgid``) may use: a run's exit status, a restore,
still get written when the agent has filled its share. The agent gets the cap less ext4's own
bookkeeping (a few percent). hangar's scratch folder ``/hangar/tmp`` (checkpoint and restore
staging, locks) is not on the volume at all but on a second one, ``<folder>/scratch.img``, of
hangar's alone and as large as the first with some room to spare: the agent can starve it of
neither blocks nor inodes, and a checkpoint can stage a copy of everything the agent wrote
(parts are written whole before the part cap drops them), as it could on the host's disk.

**Cost.** The filesystem is made once per sandboxes folder and size with ``mkfs.ext4`` (a
template, ``<root>/.disk-<bytes>.img``, made under a temporary name and renamed into place);
each sandbox's image is a sparse copy of the template's few MiB of metadata (on a filesystem
that reports no holes, mkfs.ext4 makes each image instead). Attaching and mounting are two
system calls each in the launcher. No journal (nothing on the volume outlives the
sandbox, which a reboot ends), inode tables left to initialise as they are used.

Limits, documented: the caps of many sandboxes together may exceed the host's free space (the
images are sparse; ``hangar doctor`` compares them); and if the host's disk does fill, the
sandboxes' writes fail with I/O errors.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hangar.errors import SandboxError, SandboxUnavailable
from hangar.sandboxes.local.processes import HOST_ENV, host_tool

IMAGE = "disk.img"
"""The sandbox's volume, in its folder on the host (root's, 0600)."""
SCRATCH_IMAGE = "scratch.img"
"""hangar's scratch volume, beside it."""
SCRATCH_SPARE = 64 << 20
"""The scratch volume's room beyond a copy of the whole volume (a checkpoint's git scratch)."""
LOOP_CONTROL = "/dev/loop-control"
RESERVED_MIN = 8 << 20
"""hangar's uid's share of a volume (ext4's reserved blocks): 1%, and at least this."""
MIN_BYTES = 32 << 20
"""The smallest volume: ext4's own bookkeeping needs a few MiB."""
_MKFS_FEATURES = "^has_journal,^resize_inode"
_MKFS_TIMEOUT = 60.0


@dataclass(frozen=True)
class Disk:
    """One sandbox's disk: the agent's ``cap``, on a volume with hangar's share on top."""

    cap: int

    @property
    def reserved(self) -> int:
        return max(self.cap // 100, RESERVED_MIN) // 4096 * 4096

    @property
    def size(self) -> int:
        """The volume's size: the agent's cap and hangar's share."""
        return self.cap + self.reserved

    @property
    def scratch(self) -> int:
        """The scratch volume's size: room for a copy of the whole volume, and some."""
        return self.size + SCRATCH_SPARE

    def volumes(self, root: Path, folder: Path, hangar_uid: int,
                tree: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:  # fmt: skip
        """Make both images in ``folder``; the launcher's ``volumes``: the agent's, holding
        ``tree``, then the scratch one, holding ``tmp/`` (bound at /hangar/tmp). Inode tables
        are left uninitialised (zeroing them would write a sparse image full)."""
        options = "noinit_itable"
        volume = _image(root, folder / IMAGE, self.size, self.reserved)
        scratch = _image(root, folder / SCRATCH_IMAGE, self.scratch, 0)
        return [
            {"name": "volume", "image": str(volume), "tree": list(tree),
             "options": f"{options},resuid={hangar_uid},resgid={hangar_uid}"},
            # discard: what staging frees goes back to the host (few, large files: cheap)
            {"name": "scratch", "image": str(scratch), "options": f"{options},discard",
             "tree": [{"path": "tmp", "uid": hangar_uid, "mode": 0o700}]},
        ]  # fmt: skip


def disk_for(disk_gb: float) -> Disk | None:
    """The disk of the settings, or None for no cap (``HANGAR_SANDBOX_DISK_GB=0``)."""
    if disk_gb <= 0:
        return None
    return Disk(cap=max(int(disk_gb * (1 << 30)), MIN_BYTES) // 4096 * 4096)


def usable() -> str | None:
    """None when volumes can be made and mounted here; else why not (the tools to install)."""
    if host_tool("mkfs.ext4") is None:
        return "mkfs.ext4 (e2fsprogs) is not installed; run `make install`"
    if not os.path.exists(LOOP_CONTROL):
        return f"{LOOP_CONTROL} is missing: this machine gives no loop devices"
    return None


def _image(root: Path, image: Path, size: int, reserved: int) -> Path:
    """Write ``image``: a sparse copy of the root's template for ``size`` and ``reserved``
    bytes, the template made first if missing.

    SandboxUnavailable when mkfs.ext4 or loop devices are missing; SandboxError when the
    template cannot be made or copied."""
    why = usable()
    if why is not None:
        raise SandboxUnavailable(f"sandbox disks: {why} (or set HANGAR_SANDBOX_DISK_GB=0 to "
                                 "run sandboxes without a disk cap)", tool="mkfs.ext4")  # fmt: skip
    template = root / f".disk-{size}-{reserved}.img"
    try:
        if not template.exists():
            part = template.with_name(f"{template.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
            try:
                _mkfs(part, size, reserved)
                os.replace(part, template)  # two makers at once: either one's is whole
            finally:
                if part.exists():
                    part.unlink()
        if _holes_show(template):
            _sparse_copy(template, image)
        else:  # a filesystem that reports no holes: copying would write the whole image
            _mkfs(image, size, reserved)
    except OSError as exc:
        raise SandboxError(f"cannot make the sandbox's disk {image}: {exc}") from exc
    return image


def _mkfs(path: Path, size: int, reserved: int) -> None:
    """A new sparse file at ``path`` (0600) holding an empty ext4 of ``size`` bytes, with
    ``reserved`` of them reserved."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        os.ftruncate(fd, size)
    finally:
        os.close(fd)
    try:
        subprocess.run(
            [host_tool("mkfs.ext4") or "mkfs.ext4", "-q", "-F", "-O", _MKFS_FEATURES,
             "-E", "lazy_itable_init=1,nodiscard", "-m", f"{100 * reserved / size:.4f}",
             "-L", "hangar-sandbox", str(path)],
            env=HOST_ENV, stdin=subprocess.DEVNULL, capture_output=True, check=True,
            timeout=_MKFS_TIMEOUT,
        )  # fmt: skip
    except subprocess.CalledProcessError as exc:
        said = exc.stderr.decode(errors="replace").strip()
        raise SandboxError(f"mkfs.ext4 could not make a sandbox disk: {said}") from exc
    except subprocess.SubprocessError as exc:
        raise SandboxError(f"mkfs.ext4 could not make a sandbox disk: {exc}") from exc


def _holes_show(path: Path) -> bool:
    """Whether the filesystem says where ``path``'s holes are (SEEK_HOLE before its end)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.lseek(fd, 0, os.SEEK_HOLE) < os.fstat(fd).st_size
    finally:
        os.close(fd)


def _sparse_copy(src: Path, dst: Path) -> None:
    """Copy ``src`` to a new ``dst`` (0600) leaving its holes as holes."""
    fin = os.open(src, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fout = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            size = os.fstat(fin).st_size
            os.ftruncate(fout, size)
            offset = 0
            while offset < size:
                try:
                    data = os.lseek(fin, offset, os.SEEK_DATA)
                except OSError as exc:
                    if exc.errno == errno.ENXIO:  # only a hole is left
                        break
                    raise
                hole = os.lseek(fin, data, os.SEEK_HOLE)
                while data < hole:
                    copied = _copy_range(fin, fout, hole - data, data)
                    if copied == 0:
                        raise OSError(errno.EIO, f"{src} ended early")
                    data += copied
                offset = hole
        finally:
            os.close(fout)
    finally:
        os.close(fin)


def _copy_range(fin: int, fout: int, count: int, offset: int) -> int:
    """Copy up to ``count`` bytes at ``offset`` in the kernel, or through here where the
    filesystem will not (across filesystems, or one without copy_file_range)."""
    try:
        return os.copy_file_range(fin, fout, count, offset, offset)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            raise
    data = os.pread(fin, min(count, 1 << 20), offset)
    return os.pwrite(fout, data, offset) if data else 0
