"""A sandbox made the way the first layout made them (the host's user and network namespaces,
root with every capability dropped, a record with no ``layout``), for the tests that check how
hangar finds, uses and replaces such sandboxes. Nothing in hangar makes one any more."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from datetime import UTC, datetime
from pathlib import Path

INIT = """\
import os, signal
os.write({fd}, b"r")
os.close({fd})
signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGCHLD}})
while True:
    try:
        os.waitpid(-1, 0)
    except ChildProcessError:
        signal.sigwait({{signal.SIGCHLD}})
"""


def make_legacy_sandbox(root: Path, labels: dict[str, str], ro_paths: list[str]) -> str:
    """Start a first-layout sandbox under ``root``; returns its id."""
    sandbox_id = f"sbx-{secrets.token_hex(4)}"
    folder = root / sandbox_id
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    folder.mkdir(mode=0o700)
    for name, mode in (("home", 0o700), ("workspace", 0o755), ("tmp", 0o1777)):
        (folder / name).mkdir()
        os.chmod(folder / name, mode)
    args = ["bwrap", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--share-net",
            "--cap-drop", "ALL", "--as-pid-1", "--hostname", sandbox_id, "--tmpfs", "/"]  # fmt: skip
    for d in ("/usr", "/etc", "/opt"):
        if os.path.isdir(d):
            args += ["--ro-bind", d, d]
    for d in ("/bin", "/sbin", "/lib", "/lib64"):
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/dev/shm"]
    args += ["--bind", str(folder / "home"), "/root", "--bind", str(folder / "workspace"),
             "/workspace", "--bind", str(folder / "tmp"), "/tmp"]  # fmt: skip
    for path in ro_paths:
        parents = [str(p) for p in reversed(Path(path).parents) if str(p) != "/"]
        for parent in parents:
            args += ["--perms", "0755", "--dir", parent]
        args += ["--ro-bind", path, path]
    info_r, info_w = os.pipe()
    ready_r, ready_w = os.pipe()
    args += ["--chdir", "/root", "--info-fd", str(info_w), "/usr/bin/python3", "-I", "-c",
             INIT.format(fd=ready_w)]  # fmt: skip
    subprocess.run(["setsid", "--fork", *args], pass_fds=(info_w, ready_w), check=True,
                   stdin=subprocess.DEVNULL)  # fmt: skip
    os.close(info_w)
    os.close(ready_w)
    info = b""
    while chunk := os.read(info_r, 4096):
        info += chunk
    pid = json.loads(info)["child-pid"]
    assert os.read(ready_r, 1) == b"r"
    os.close(info_r)
    os.close(ready_r)
    with open(f"/proc/{pid}/stat", "rb") as f:
        started = int(f.read().rsplit(b")", 1)[1].split()[19])
    record = {"id": sandbox_id, "labels": labels, "created_at": datetime.now(UTC).isoformat(),
              "init_pid": pid, "init_start_time": started, "env": {}}  # fmt: skip
    (folder / "record.json").write_text(json.dumps(record))
    return sandbox_id
