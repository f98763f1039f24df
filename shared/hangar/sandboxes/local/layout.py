"""The layout of a local sandbox: its folder on the host and what bubblewrap shows inside.

``<root>/<id>/`` (root's, 0711: hangar's uid may pass through it, nobody may list it)::

    record.json     the backend's record (root's, 0600)
    init.log        what the launcher and bubblewrap said (root's, 0600)
    disk.img        the sandbox's volume (:mod:`hangar.sandboxes.local.disk`), holding the tree below
    etc/            passwd, group, hosts, resolv.conf and gitconfig shown over the host's /etc

The tree (:func:`volume_tree`: on the volume, or in the folder itself when there is no disk
cap)::

    home/           HOME inside (/root): the agent's, 0700
    workspace/      /workspace: the agent's
    tmp/            /tmp: shared, sticky
    shm/            /dev/shm: shared, sticky
    hangar/         /hangar: hangar's uid's, 0711, holding
        runs/         detached runs (0711: the agent reads the files it must, writes none)
        bin/          hangar's commands for the agent (hangar-agent), first on its PATH (0755)
        tmp/          hangar's scratch space and locks (0700; with a disk, on its own volume)
        lib/          the in-sandbox scripts, by digest, with their bytecode (0711: the agent
                      runs some of them, lists and writes none)
        sandbox.json  who the agent is and its limits, for the run supervisor
        harnesses/    where the harness folder is shown, read-only
        limits/       where the agent's cgroup files are shown (hangar's only)

Inside: a tmpfs root; ``/usr``, ``/opt`` and ``/etc`` read-only from the host (``/bin`` and
the like mirrored), the files of ``etc/`` in place of the host's (:func:`etc_args`); its own ``/proc``
and ``/dev``; the folders above; each ``ro_paths`` entry read-only at its own path. Nothing
else of the host.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from hangar.sandboxes import HANGAR_BIN, HANGAR_DIR, HANGAR_TMP, HOME, WORKSPACE
from hangar.sandboxes.local.isolation import INNER_AGENT, Limits, LimitsMode

HARNESS_MOUNT = f"{HANGAR_DIR}/harnesses"
"""Where the harness folder appears inside; its ``bin/`` and ``node_modules/.bin/`` are on PATH."""
RUNS_DIR = f"{HANGAR_DIR}/runs"
SANDBOX_JSON = f"{HANGAR_DIR}/sandbox.json"
LIMITS_DIR = f"{HANGAR_DIR}/limits"

SANDBOX_PATH = (
    f"{HANGAR_BIN}:{HARNESS_MOUNT}/bin:{HARNESS_MOUNT}/node_modules/.bin:/usr/local/bin:/usr/bin:/bin"
)
HANGAR_PATH = "/usr/bin:/bin:/usr/sbin:/sbin"
DNS = "10.0.2.3"  # slirp4netns's resolver

SYSTEM_DIRS = ("/usr", "/etc", "/opt")
SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
BOUND = ("/proc", "/dev", HOME, WORKSPACE, "/tmp", HANGAR_DIR)
OWN_MOUNTS = ("/", *SYSTEM_DIRS, *BOUND)
ETC_FILES = ("passwd", "group", "hosts", "resolv.conf", "gitconfig")

# PID 1 inside: a shell says it runs (bubblewrap has set everything up and executed it) at
# once, then becomes a Python that closes every descriptor but those it must hold for the
# sandbox's life and reaps every orphan for ever. The shell starts in a millisecond where the
# Python takes ten, on every sandbox's start; ``_signal``, not ``signal``: the latter imports
# ``enum``, which took 7 ms more. Until the Python runs, nothing in the sandbox can reach the
# descriptors it has yet to close: they are PID 1's, hangar's user's.
INIT = """\
import os, sys, _signal
low = 3
for fd in sorted({int(fd) for fd in sys.argv[1].split(",") if fd}) + [1024]:
    if fd >= low:
        os.closerange(low, fd)
        low = fd + 1
_signal.pthread_sigmask(_signal.SIG_BLOCK, {_signal.SIGCHLD})
while True:
    try:
        os.waitpid(-1, 0)
    except ChildProcessError:
        _signal.sigwait({_signal.SIGCHLD})
"""
INIT_ARGV = ("/bin/sh", "-c",
             'printf r >&"$2" && eval "exec $2>&-" && exec /usr/bin/python3 -I -S -c "$0" "$1"',
             INIT)  # fmt: skip
"""The init's command; the launcher adds the descriptors to hold (``3,5``) and the one to say
"r" on, which it closes."""


def make_folder(folder: Path, hostname: str, hangar_uid: int, agent_uid: int,
                limits: Limits, cgroup_files: Sequence[str], *,
                volume: bool = False) -> list[dict[str, Any]]:  # fmt: skip
    """Fill a new sandbox folder (it exists, empty) with ``etc/`` and, unless the tree goes on
    a ``volume`` (then the launcher makes it there), the tree; returns the tree."""
    from hangar.sandboxes.local.launcher import make_tree

    os.chmod(folder, 0o711)
    (folder / "etc").mkdir()
    os.chmod(folder / "etc", 0o755)
    etc = {
        "passwd": "root:x:0:0:hangar:/hangar:/bin/sh\n"
        f"agent:x:{INNER_AGENT}:{INNER_AGENT}:agent:{HOME}:/bin/bash\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
        "group": f"root:x:0:\nagent:x:{INNER_AGENT}:\nnogroup:x:65534:\n",
        "hosts": f"127.0.0.1\tlocalhost\n127.0.1.1\t{hostname}\n::1\tip6-localhost ip6-loopback\n",
        "resolv.conf": f"nameserver {DNS}\n",
        # A local-path repo (read-only, the host's) has another owner than the agent: git
        # refuses it unless the system config says otherwise. Everything else stays.
        "gitconfig": _host_text("/etc/gitconfig") + "[safe]\n\tdirectory = *\n",
    }
    for name, text in etc.items():
        (folder / "etc" / name).write_text(text)
        os.chmod(folder / "etc" / name, 0o644)
    tree = volume_tree(hangar_uid, agent_uid, limits, cgroup_files)
    if not volume:
        make_tree(str(folder), tree)  # type: ignore[no-untyped-call]  # a standalone script
    return tree


def volume_tree(hangar_uid: int, agent_uid: int, limits: Limits,
                cgroup_files: Sequence[str]) -> list[dict[str, Any]]:  # fmt: skip
    """What a sandbox can write, as :func:`hangar.sandboxes.local.launcher.make_tree` makes it."""
    folders = [
        ("home", agent_uid, 0o700),
        ("workspace", agent_uid, 0o755),
        ("tmp", hangar_uid, 0o1777),
        ("shm", hangar_uid, 0o1777),
        ("hangar", hangar_uid, 0o711),
        ("hangar/runs", hangar_uid, 0o711),
        ("hangar/bin", hangar_uid, 0o755),
        ("hangar/tmp", hangar_uid, 0o700),
        ("hangar/lib", hangar_uid, 0o711),
        ("hangar/harnesses", hangar_uid, 0o755),
        ("hangar/limits", hangar_uid, 0o700),
    ]
    tree: list[dict[str, Any]] = [{"path": p, "uid": u, "mode": m} for p, u, m in folders]
    for name in ("pids.procs", "memory.procs")[: len(cgroup_files)]:
        tree.append({"path": f"hangar/limits/{name}", "uid": 0, "mode": 0o600, "text": ""})
    described = {
        "agent": {"uid": INNER_AGENT, "gid": INNER_AGENT, "home": HOME, "path": SANDBOX_PATH},
        "cgroup_procs": [f"{LIMITS_DIR}/{n}" for n in ("pids.procs", "memory.procs")][
            : len(cgroup_files)
        ],
        "rlimits": {"nproc": limits.max_pids, "as": limits.memory_bytes}
        if limits.mode is LimitsMode.RLIMIT
        else {},
    }
    tree.append({"path": "hangar/sandbox.json", "uid": hangar_uid, "mode": 0o644,
                 "text": json.dumps(described)})  # fmt: skip
    return tree


def _host_text(path: str) -> str:
    try:
        text = Path(path).read_text()
    except OSError:
        return ""
    return text if text.endswith("\n") or not text else text + "\n"


def binds_and_args(
    folder: Path,
    stage: str,
    hostname: str,
    ro_paths: Sequence[str],
    harness_dir: Path | None,
    cgroup_files: Sequence[str],
    volumes: bool = False,
) -> tuple[list[dict[str, str]], list[str]]:
    """The launcher's staged binds and bubblewrap's options (all but the command).

    Every host path under a folder the unprivileged bubblewrap cannot pass through (the data
    folder, /root, pytest's temp folders) is staged first; the system folders and the cgroup
    files are reachable as they are. With ``volumes``, the tree is on the volume the launcher
    mounts at STAGE/volume, and hangar's scratch folder on the one at STAGE/scratch."""
    binds = [{"src": str(folder), "name": "sandbox", "kind": "dir"}]
    box = f"{stage}/sandbox"
    vol = f"{stage}/volume" if volumes else box
    args = ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net"]
    args += ["--unshare-cgroup-try", "--as-pid-1", "--hostname", hostname, "--tmpfs", "/"]
    for d in SYSTEM_DIRS:
        if d != "/etc" and os.path.isdir(d) and not os.path.islink(d):
            args += ["--ro-bind", d, d]
    for d in SYSTEM_LINKS:
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    args += etc_args(f"{box}/etc")
    args += ["--proc", "/proc", "--dev", "/dev", "--bind", f"{vol}/shm", "/dev/shm"]
    args += ["--bind", f"{vol}/home", HOME, "--bind", f"{vol}/workspace", WORKSPACE]
    args += ["--bind", f"{vol}/tmp", "/tmp", "--bind", f"{vol}/hangar", HANGAR_DIR]
    if volumes:  # off the agent's volume: it can starve it of neither blocks nor inodes
        args += ["--bind", f"{stage}/scratch/tmp", HANGAR_TMP]
    for src, name in zip(cgroup_files, ("pids.procs", "memory.procs"), strict=False):
        args += ["--bind", src, f"{LIMITS_DIR}/{name}"]
    if harness_dir is not None and harness_dir.is_dir():
        binds.append({"src": str(harness_dir), "name": "harnesses", "kind": "dir"})
        args += ["--ro-bind", f"{stage}/harnesses", HARNESS_MOUNT]
    made: set[str] = set()
    for i, path in enumerate(ro_paths):
        kind = "dir" if os.path.isdir(path) else "file"
        binds.append({"src": path, "name": f"ro{i}", "kind": kind})
        args += parents(path, made)
        args += ["--ro-bind", f"{stage}/ro{i}", path]
    return binds, args + ["--chdir", "/"]


def etc_args(generated: str) -> list[str]:
    """/etc: the host's, read-only, and ours in place of theirs. Where the host has each of ours
    as a regular file, that is one bind of the host's /etc with ours bound over its files (each
    bind costs bubblewrap a mount: one per entry took the start 36 ms longer). Otherwise (one of
    ours missing, or a link to elsewhere: a read-only /etc has no file to bind over), the host's
    entries one by one (links as links) on a folder of their own, and ours beside them."""
    if os.path.isdir("/etc") and not os.path.islink("/etc") and all(
        stat.S_ISREG(_lstat_mode(f"/etc/{name}")) for name in ETC_FILES
    ):
        args = ["--ro-bind", "/etc", "/etc"]
        for name in ETC_FILES:
            args += ["--ro-bind", f"{generated}/{name}", f"/etc/{name}"]
        return args
    args = ["--perms", "0755", "--dir", "/etc"]
    try:
        entries = sorted(os.listdir("/etc"))
    except OSError:
        entries = []
    for name in entries:
        if name in ETC_FILES:
            continue
        path = f"/etc/{name}"
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        else:
            args += ["--ro-bind", path, path]
    for name in ETC_FILES:
        args += ["--ro-bind", f"{generated}/{name}", f"/etc/{name}"]
    return args


def _lstat_mode(path: str) -> int:
    try:
        return os.lstat(path).st_mode
    except OSError:
        return 0


def parents(path: str, made: set[str]) -> list[str]:
    """``--dir`` ops making the missing parents of ``path`` traversable (bwrap makes 0700)."""
    args: list[str] = []
    for parent in reversed(PurePosixPath(path).parents):
        p = str(parent)
        if p == "/" or p in made or p in BOUND or under(p, SYSTEM_DIRS):
            continue
        made.add(p)
        args += ["--perms", "0755", "--dir", p]
    return args


def under(path: str, folders: Sequence[str]) -> bool:
    return any(PurePosixPath(path).is_relative_to(f) for f in folders)
