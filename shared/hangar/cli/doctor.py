"""``hangar doctor``: configuration checks, one line each: ``OK``, ``WARN`` or ``FAIL``, then
what was checked. Exits 1 if any check failed.

The local checks are about this machine as a server (settings, data folder, the tools local
sandboxes need, the harness CLIs); the last ones ask the server at ``HANGAR_URL`` whether it
answers and takes the token.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Mapping
from pathlib import Path

from hangar.cli.client import ApiError
from hangar.config import Settings
from hangar.errors import HangarError

SANDBOX_TOOLS = {
    "bwrap": "bubblewrap: local sandboxes",
    "nsenter": "util-linux: exec into local sandboxes",
    "setpriv": "util-linux: dropping capabilities in local sandboxes",
    "tmux": "detached turns",
    "git": "cloning repos and checking environments",
    "script": "util-linux: session shell terminals",
}
HARNESS_BINARIES = {"claude": "claude", "codex": "codex", "pi": "pi", "antigravity": "agy"}


class Report:
    def __init__(self) -> None:
        self.failed = False

    def line(self, level: str, text: str) -> None:
        self.failed = self.failed or level == "FAIL"
        print(f"{level:4}  {text}", flush=True)

    def check(self, ok: bool, good: str, bad: str, level: str = "FAIL") -> bool:
        self.line("OK", good) if ok else self.line(level, bad)
        return ok


def doctor(env: Mapping[str, str]) -> int:
    report = Report()
    try:
        settings = Settings.from_env(env)
    except HangarError as exc:
        report.line("FAIL", f"settings: {exc.message}")
        return 1
    report.line("OK", f"settings parse (data dir {settings.data_dir}, server {settings.url})")
    _data_dir(report, settings.data_dir)
    if settings.sandboxes.startswith("local:"):
        for tool, why in SANDBOX_TOOLS.items():
            report.check(shutil.which(tool) is not None, f"{tool} is installed ({why})",
                         f"{tool} is missing ({why}): make install")  # fmt: skip
        report.check(shutil.which("zstd") is not None, "zstd is installed (fast checkpoints)",
                     "zstd is missing: checkpoints fall back to gzip", "WARN")  # fmt: skip
        report.check(os.geteuid() == 0, "running as root (local sandboxes need it)",
                     "not root: local sandboxes (bubblewrap, nsenter) need root")  # fmt: skip
    _harnesses(report, settings.harness_dir)
    _server(report, settings)
    return 1 if report.failed else 0


def _data_dir(report: Report, data_dir: Path) -> None:
    existing = data_dir
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    report.check(os.access(existing, os.W_OK), f"data dir {data_dir} is writable",
                 f"data dir {data_dir} is not writable (HANGAR_DATA_DIR)")  # fmt: skip
    token_file = data_dir / "admin-token"
    if token_file.exists():
        mode = stat.S_IMODE(token_file.stat().st_mode)
        report.check(not mode & 0o077, f"{token_file} is private (mode {mode:o})",
                     f"{token_file} has mode {mode:o}: chmod 600 it")  # fmt: skip


def _harnesses(report: Report, harness_dir: Path) -> None:
    folders = [harness_dir / "bin", harness_dir / "node_modules" / ".bin"]
    found = []
    for harness, binary in HARNESS_BINARIES.items():
        if any((folder / binary).exists() for folder in folders):
            found.append(harness)
            report.line("OK", f"harness {harness}: {binary} is in {harness_dir}")
        else:
            report.line("WARN", f"harness {harness}: no {binary} in {harness_dir}/bin or "
                        "node_modules/.bin (make harnesses)")  # fmt: skip
    if not found:
        report.line("FAIL", f"no harness CLI in HANGAR_HARNESS_DIR ({harness_dir}): sessions "
                    "cannot run turns")  # fmt: skip
    elif any(h != "antigravity" for h in found):
        report.check(shutil.which("node") is not None, "node is installed (the npm harnesses)",
                     "node is missing: the npm harness CLIs need Node.js 20")  # fmt: skip


def _server(report: Report, settings: Settings) -> None:
    from hangar.cli.commands import client

    api = client(settings)
    if not api.token:
        report.line("FAIL", api.token_hint)
    try:
        api.call("GET", "/api/openapi.json")
    except ApiError as exc:
        report.line("FAIL", f"no answer from hangar at {api.url}: start it with hangar serve "
                    f"({exc.code})")  # fmt: skip
        return
    report.line("OK", f"hangar answers at {api.url}")
    if not api.token:
        return
    try:
        api.call("GET", "/api/sessions")
    except ApiError as exc:
        report.line("FAIL", f"the token is refused: {exc.message} ({exc.code})")
        return
    report.line("OK", "the token works (admin scope)")
