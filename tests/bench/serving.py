"""What the bench lines that time a running ``hangar serve`` share: the server, over a data
folder seeded first, and the JSON line of a measure.

The server is ``hangar serve --port 0`` of whatever ``hangar`` package this Python imports, so
``PYTHONPATH=OTHER/shared`` measures another tree.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from hangar.config import Settings
from hangar.db.sqlite import SqliteDb

CLI = "import sys; from hangar.cli import main; sys.exit(main())"
"""``python -c CLI ARGS`` runs the ``hangar`` command of the package this Python imports."""
START_SECONDS = 30.0
T = TypeVar("T")


@dataclass(frozen=True)
class Served(Generic[T]):
    url: str
    """The base URL the server says it serves (the CLI's ``HANGAR_URL``)."""
    env: dict[str, str]
    """The environment a ``hangar`` command needs to use that server."""
    token: str
    seeded: T
    """What the seed stored."""


@contextlib.contextmanager
def served(root: Path, seed: Callable[[SqliteDb], T]) -> Iterator[Served[T]]:
    """``hangar serve`` over a new data folder under ``root`` (which must exist), once ``seed``
    has stored in its database what the measure reads; stopped on leaving."""
    data_dir, harnesses = root / "data", root / "harnesses"
    harnesses.mkdir(parents=True, exist_ok=True)
    settings = Settings.build(data_dir=data_dir, harness_dir=harnesses)
    db = SqliteDb.from_url(settings.db)
    try:
        seeded = seed(db)
    finally:
        db.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANGAR_")}
    env.update(HANGAR_DATA_DIR=str(data_dir), HANGAR_HARNESS_DIR=str(harnesses))
    log = root / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", CLI, "serve", "--port", "0"], env=env,
                                stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT)  # fmt: skip
    try:
        url = _wait_serving(proc, log)
        token = (data_dir / "admin-token").read_text().strip()
        yield Served(url, dict(env, HANGAR_URL=url), token, seeded)
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_serving(proc: subprocess.Popen[bytes], log: Path) -> str:
    """The URL ``hangar serve`` says it serves (without ``/api``), once it says so."""
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        for line in log.read_bytes().splitlines():
            if b"serving http://" in line:
                url = line.split(b"serving ", 1)[1].split()[0].decode()
                return url.removesuffix("/api")  # older banners named the API's prefix
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise RuntimeError(f"hangar serve did not start:\n{log.read_text(errors='replace')}")


def line(name: str, samples: list[float], target: float | None,
         includes: str | None = None) -> dict[str, object]:  # fmt: skip
    """The bench's JSON line for ``samples`` (seconds): the median against ``target``, and what
    the time includes when that needs saying."""
    out: dict[str, object] = {
        "bench": name,
        "seconds": round(statistics.median(samples), 4),
        "target": target,
        "runs": len(samples),
        "samples": [round(s, 4) for s in samples],
    }
    if includes is not None:
        out["includes"] = includes
    return out
