"""Cold starts of the Cloud Run functions, each measured in a fresh interpreter.

- ``cold_import_api`` / ``cold_import_ticks`` (target 0.5 s, BRIEF §7): importing the
  function's ``main.py``, what an instance pays before it can take its first request.
- ``cold_build_api`` / ``cold_build_ticks`` (target 0.5 s, BRIEF §7: a cold function's first
  request): that import plus building the function from cloud settings (the runtime, the app),
  which the first request pays. Building contacts no service, so no emulator is needed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TARGET = 0.5
CLOUD_ENV = {
    "HANGAR_DB": "firestore://bench/(default)",
    "HANGAR_SESSION_STORE": "gs://bench/sessions",
    "HANGAR_KEYS": "gcpkms://projects/bench/locations/global/keyRings/r/cryptoKeys/k",
    "HANGAR_TICKS": "cloudtasks://projects/bench/locations/us-central1/queues/q",
    "HANGAR_TICKS_URL": "http://127.0.0.1:9/",
}
_PROBE = """
import os, sys, time
sys.path.insert(0, {folder!r})
start = time.perf_counter()
import main
imported = time.perf_counter() - start
if {build!r}:
    from hangar import functions
    kind = functions.ApiFunction if {name!r} == "api" else functions.TicksFunction
    os.environ.update({env!r}, HANGAR_DATA_DIR={data!r})
    kind.from_env(os.environ)
print(time.perf_counter() - start if {build!r} else imported)
"""


def sample(name: str, build: bool, data_dir: Path) -> float:
    code = _PROBE.format(folder=str(ROOT / "functions" / name), build=build, name=name,
                         env=CLOUD_ENV, data=str(data_dir))  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=ROOT)  # fmt: skip
    return float(done.stdout.strip().splitlines()[-1])


def lines(runs: int, data_dir: Path) -> list[dict[str, object]]:
    """One JSON line per measure: median seconds over ``runs`` fresh interpreters."""
    out: list[dict[str, object]] = []
    for name in ("api", "ticks"):
        for build in (False, True):
            samples = sorted(sample(name, build, data_dir) for _ in range(runs))
            out.append({
                "bench": f"cold_{'build' if build else 'import'}_{name}",
                "seconds": round(samples[len(samples) // 2], 4),
                "target": TARGET,
                "runs": runs,
                "samples": [round(s, 4) for s in samples],
            })  # fmt: skip
    return out


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        for line in lines(5, Path(tmp)):
            print(json.dumps(line))
