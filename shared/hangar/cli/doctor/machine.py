"""The doctor's checks of this machine as a server (the data folder, the tools local sandboxes
need, the harness CLIs) and of the server at ``HANGAR_URL`` (does it answer, does it take the
token)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from hangar.cli.client import ApiError, configured
from hangar.cli.doctor.report import ProbeTimeout, Report, within
from hangar.config import Settings

SANDBOX_TOOLS = {
    "bwrap": "bubblewrap: local sandboxes",
    "nsenter": "util-linux: exec into local sandboxes",
    "setpriv": "util-linux: dropping capabilities in local sandboxes",
    "slirp4netns": "each local sandbox's own network",
    "nft": "nftables: what each local sandbox may reach",
    "prlimit": "util-linux: the agent's limits where cgroups are not usable",
    "git": "cloning repos and checking environments",
    "script": "util-linux: session shell terminals",
}
HARNESS_BINARIES = {"claude": "claude", "codex": "codex", "pi": "pi", "antigravity": "agy"}
NOT_INSTALLED = ("antigravity",)
"""Harnesses ``make harnesses`` does not install (it installs the pinned npm CLIs only):
missing, they are INFO, not WARN."""


def data_dir(report: Report, data_dir: Path) -> None:
    existing = data_dir
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    report.check(os.access(existing, os.W_OK), f"data dir {data_dir} is writable",
                 f"data dir {data_dir} is not writable (HANGAR_DATA_DIR)")  # fmt: skip
    if not data_dir.exists():
        return
    from hangar.private import loose

    opened = loose(data_dir)
    for path, mode in opened:
        report.line("WARN", f"{path} has mode {mode:o}: others can reach it (hangar serve "
                    "makes the data folder 0700 and its files 0600 at start)")  # fmt: skip
    if not opened:
        report.line("OK", f"data dir {data_dir} is private (0700, hangar's files 0600)")


def sandbox_tools(report: Report) -> None:
    """What local sandboxes need on this machine."""
    for tool, why in SANDBOX_TOOLS.items():
        report.check(shutil.which(tool) is not None, f"{tool} is installed ({why})",
                     f"{tool} is missing ({why}): make install")  # fmt: skip
    report.check(shutil.which("zstd") is not None, "zstd is installed (fast checkpoints)",
                 "zstd is missing: checkpoints fall back to gzip", "WARN")  # fmt: skip
    report.check(os.geteuid() == 0, "running as root (local sandboxes need it)",
                 "not root: local sandboxes (bubblewrap, nsenter) need root")  # fmt: skip


def harnesses(report: Report, harness_dir: Path) -> None:
    folders = [harness_dir / "bin", harness_dir / "node_modules" / ".bin"]
    found = []
    for harness, binary in HARNESS_BINARIES.items():
        if any((folder / binary).exists() for folder in folders):
            found.append(harness)
            report.line("OK", f"harness {harness}: {binary} is in {harness_dir}")
        elif harness in NOT_INSTALLED:
            report.line("INFO", f"harness {harness}: no {binary} in {harness_dir}/bin or "
                        "node_modules/.bin (make harnesses installs only Claude Code, Codex and "
                        "pi, from npm, and the antigravity adapter is unverified; to use it, put "
                        f"an {binary} binary in {harness_dir}/bin)")  # fmt: skip
        else:
            report.line("WARN", f"harness {harness}: no {binary} in {harness_dir}/bin or "
                        "node_modules/.bin (make harnesses installs it)")  # fmt: skip
    if not found:
        report.line("FAIL", f"no harness CLI in HANGAR_HARNESS_DIR ({harness_dir}): sessions "
                    "cannot run turns")  # fmt: skip
    elif any(h != "antigravity" for h in found):
        report.check(shutil.which("node") is not None, "node is installed (the npm harnesses)",
                     "node is missing: the npm harness CLIs need Node.js 20")  # fmt: skip


def server(report: Report, settings: Settings, seconds: float) -> None:
    """Does the server at HANGAR_URL answer (within ``seconds``), and does it take the token?"""
    api = configured(settings.url, settings.token, settings.data_dir)
    if not api.token:
        report.line("FAIL", api.token_hint)
    try:
        within(seconds, lambda: api.call("GET", "/api/openapi.json"))
    except (ApiError, ProbeTimeout) as exc:
        why = exc.code if isinstance(exc, ApiError) else exc
        report.line("FAIL", f"no answer from hangar at {api.url}: start it with hangar serve "
                    f"({why})")  # fmt: skip
        return
    report.line("OK", f"hangar answers at {api.url}")
    if not api.token:
        return
    try:
        sessions = within(seconds, lambda: api.call("GET", "/api/sessions",
                                                    params={"limit": 500}))  # fmt: skip
    except ProbeTimeout as exc:
        report.line("FAIL", f"hangar at {api.url} did not list sessions: {exc}")
        return
    except ApiError as exc:
        report.line("FAIL", f"the token is refused: {exc.message} ({exc.code})")
        return
    report.line("OK", "the token works (admin scope)")
    listed = sessions.get("sessions") if isinstance(sessions, dict) else None
    listed = listed if isinstance(listed, list) else []  # the newest 500 are enough to warn
    failing = [s.get("name") for s in listed if isinstance(s, dict) and s.get("checkpoint_error")]
    report.check(not failing, "no session's checkpoint is failing",
                 f"{len(failing)} session(s) whose last checkpoint failed keep their sandbox "
                 f"until one succeeds: {', '.join(str(n) for n in failing[:5])} (hangar session "
                 "get NAME says why)", "WARN")  # fmt: skip
    try:
        envs = within(seconds, lambda: api.call("GET", "/api/envs"))
    except (ApiError, ProbeTimeout) as exc:
        report.line("WARN", f"could not list the environments: {exc}")
        return
    for env in envs if isinstance(envs, list) else []:
        if isinstance(env, dict):
            for warning in env.get("warnings") or []:
                report.line("WARN", f"environment {env.get('name')}: {warning}")
    listed_envs = [e for e in envs if isinstance(e, dict)] if isinstance(envs, list) else []
    prebuilt(report, settings, {str(e.get("name")) for e in listed_envs})


def prebuilt(report: Report, settings: Settings, known: set[str]) -> None:
    """Does every environment HANGAR_PREBUILD_ENVIRONMENTS names exist (a WARN: hangar serve
    starts all the same, and prebuilds the others)? Nothing said when it is unset or ``all``."""
    names = settings.prebuilt
    if not names:
        return
    unknown = sorted(names - known)
    report.check(not unknown, f"every environment HANGAR_PREBUILD_ENVIRONMENTS names exists "
                 f"({', '.join(sorted(names))})", "HANGAR_PREBUILD_ENVIRONMENTS names no "
                 f"environment {', '.join(unknown)}: those are not prebuilt (hangar env list "
                 "shows the names; fix the setting)", "WARN")  # fmt: skip
