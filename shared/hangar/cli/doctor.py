"""``hangar doctor``: configuration checks, one line each (OK, WARN, FAIL)."""

from __future__ import annotations

import os
import shutil

from hangar.cli.client import ApiError, Client
from hangar.config import Settings


def doctor(settings: Settings, api: Client) -> int:
    results: list[tuple[str, str]] = []

    def check(ok: bool, good: str, bad: str, level: str = "FAIL") -> None:
        results.append(("OK", good) if ok else (level, bad))

    check(True, f"settings parse (data dir {settings.data_dir})", "")
    writable = settings.data_dir.exists() and os.access(settings.data_dir, os.W_OK)
    check(writable or not settings.data_dir.exists(), f"data dir {settings.data_dir} is usable",
          f"data dir {settings.data_dir} is not writable")  # fmt: skip
    if settings.sandboxes.startswith("local:"):
        for tool in ("bwrap", "nsenter", "setpriv", "tmux", "git", "tar"):
            check(shutil.which(tool) is not None, f"{tool} is installed",
                  f"{tool} is missing (make install, or apt-get install it)")  # fmt: skip
        check(shutil.which("zstd") is not None, "zstd is installed",
              "zstd is missing: checkpoints fall back to gzip (slower)", "WARN")  # fmt: skip
        check(os.geteuid() == 0, "running as root (local sandboxes need it)",
              "not root: local sandboxes (bubblewrap) need root")  # fmt: skip
    bin_dir = settings.harness_dir / "node_modules" / ".bin"
    for cli in ("claude", "codex", "pi"):
        check((bin_dir / cli).exists(), f"harness CLI {cli} is in {bin_dir}",
              f"harness CLI {cli} is not in {bin_dir} (make harnesses)", "WARN")  # fmt: skip
    try:
        api.call("GET", "/api/sessions")
        check(True, f"hangar answers at {api.url} and the token works", "")
    except ApiError as exc:
        level = "WARN" if exc.code == "unreachable" else "FAIL"
        check(False, "", f"{api.url}: {exc.message} ({exc.code})", level)
    for level, text in results:
        print(f"{level:4}  {text}")
    return 1 if any(level == "FAIL" for level, _ in results) else 0
