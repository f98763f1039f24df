"""``port_calls_followed_turn``: every call into the sandbox port while one turn runs for about
:data:`TURN_SECONDS` seconds with one client following it (``hangar session send -w``), from
the send to the end of the turn's checkpoint (issue 23: at most 10). ``BENCH_TURN_SECONDS`` makes
the turn shorter for a quick look.

A ``hangar serve`` runs in this process, on the embedded backends, with every backend's
sandboxes wrapped by :class:`Counted` (``hangar.runtime.open_sandboxes`` is patched for the
measure). The agent is the Antigravity stand-in told to run ``sleep``: the calls counted are
hangar's, whatever the agent does. The session's first turn (its sandbox's start, clone and
provisioning) is not counted. The line also says which calls were made, so a regression shows
what it added.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

TURN_SECONDS = int(os.environ.get("BENCH_TURN_SECONDS", "60"))
NAME = "port_calls_followed_turn"
TARGET = 10


class Counted:
    """A sandboxes backend whose every call is noted (its name and, for an exec, the command's
    first words) while :attr:`counting` is set."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.counting = False
        self.calls: list[str] = []
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        if not callable(value) or name.startswith("_") or name == "add_pre_destroy_hook":
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            if self.counting:
                with self._lock:
                    self.calls.append(_describe(name, args))
            return value(*args, **kwargs)

        return call


def _describe(name: str, args: tuple[Any, ...]) -> str:
    if name != "exec" or len(args) < 2:
        return name
    argv = [str(a) for a in args[1]]
    if argv and argv[0].endswith("/launch"):
        return f"exec {argv[1]}"  # an installed script, by name
    if argv[:2] == ["sh", "-c"] and len(argv) > 2:
        return f"exec sh -c {' '.join(argv[2].split())[:30]}"
    return f"exec {' '.join(argv[:2])[:40]}"


def _git(cwd: Path, *args: str) -> None:
    ident = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.com",
             "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@example.com"}  # fmt: skip
    subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True,
                   env={**os.environ, **ident})  # fmt: skip


def _remote(root: Path) -> Path:
    seed, bare = root / "seed", root / "remote" / "app.git"
    _git(root, "init", "-q", "--bare", "-b", "main", str(bare))
    _git(root, "init", "-q", "-b", "main", str(seed))
    (seed / "README.md").write_text("# app\n")
    _git(seed, "add", "-A")
    _git(seed, "commit", "-q", "-m", "seed")
    _git(seed, "push", "-q", str(bare), "main")
    return bare


@contextlib.contextmanager
def _serving(root: Path, harnesses: Path) -> Iterator[tuple[Counted, dict[str, str]]]:
    """``hangar serve`` in this process with its sandboxes counted; yields the counter and the
    environment a ``hangar`` command needs to reach it."""
    import uvicorn

    from hangar import runtime as runtime_module
    from hangar.config import Settings
    from hangar.operations.auth import TOKEN_FILE, ensure_admin_token
    from hangar.server.app import create_app
    from hangar.server.serve import listen

    counted: list[Counted] = []
    opener = runtime_module.open_sandboxes

    def open_counted(*args: Any, **kwargs: Any) -> Any:
        counted.append(Counted(opener(*args, **kwargs)))
        return counted[-1]

    env = {k: v for k, v in os.environ.items() if not k.startswith("HANGAR_")}
    env.update(HANGAR_DATA_DIR=str(root / "data"), HANGAR_HARNESS_DIR=str(harnesses))
    runtime_module.open_sandboxes = open_counted  # type: ignore[assignment]
    try:
        settings = Settings.build(data_dir=root / "data", harness_dir=harnesses)
        runtime = runtime_module.Runtime(settings)
    finally:
        runtime_module.open_sandboxes = opener  # type: ignore[assignment]
    ensure_admin_token(runtime.db, root / "data" / TOKEN_FILE)
    sock = listen("127.0.0.1", 0)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(runtime), log_level="warning",
                                           lifespan="off"))  # fmt: skip
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    runtime.start()
    thread.start()
    try:
        yield counted[0], dict(env, HANGAR_URL=f"http://127.0.0.1:{port}")
    finally:
        server.should_exit = True
        thread.join(20)
        for info in counted[0].list():
            counted[0].destroy(info.id)
        runtime.close()


def measure() -> dict[str, Any]:
    """One measure: the calls of a followed turn of TURN_SECONDS, and what they were."""
    from tests.e2e.conftest import standin_harnesses

    hangar = str(Path(sys.executable).with_name("hangar"))
    with tempfile.TemporaryDirectory(prefix="hangar-bench-calls-") as tmp:
        root = Path(tmp)
        root.chmod(0o755)  # the sandbox (its own uids) reaches the harness folder inside
        remote = _remote(root)
        with _serving(root, standin_harnesses(root)) as (counted, env):
            def cli(*args: str) -> None:
                done = subprocess.run([hangar, *args], env=env, capture_output=True, text=True,
                                      timeout=TURN_SECONDS + 240, stdin=subprocess.DEVNULL)
                if done.returncode != 0:
                    raise RuntimeError(f"hangar {' '.join(args)}: {done.stderr}")

            cli("env", "add", "app", "--repo", str(remote))
            cli("session", "new", "b", "hello", "--env", "app", "--harness", "antigravity",
                "-w")  # fmt: skip
            counted.counting = True
            started = time.monotonic()
            cli("session", "send", "b", f"run: sleep {TURN_SECONDS}", "-w")
            elapsed = time.monotonic() - started
            counted.counting = False
            calls = list(counted.calls)
    kinds = collections.Counter(calls)
    return {"bench": NAME, "calls": len(calls), "target": TARGET, "seconds": round(elapsed, 1),
            "which": dict(kinds.most_common())}  # fmt: skip


def main() -> int:
    print(json.dumps(measure()), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
