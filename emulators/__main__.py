"""``emulators/run [--namespace NS] -- CMD...``: start every cloud emulator, run CMD with the
environment pointing hangar at them, stop them afterwards; exits with CMD's status.

Without CMD it prints the environment (``export NAME=VALUE`` lines) and serves until Ctrl-C or
SIGTERM, for a shell in another terminal. A missing emulator ends it at once with a message
saying what to install (exit 2).
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import threading
from types import FrameType

from emulators.cloud import CloudEmulators
from emulators.processes import EmulatorMissing


def _say(text: str) -> None:
    print(f"emulators: {text}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="emulators/run",
        description="Run CMD against the Firestore, GCS, Cloud Tasks and KMS emulators.",
    )
    parser.add_argument("--namespace", default="",
                        help="keep this run's data apart on the emulators (default: none)")  # fmt: skip
    parser.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    args = parser.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd

    stopping = threading.Event()
    child: subprocess.Popen[bytes] | None = None

    def forward(signum: int, frame: FrameType | None) -> None:
        stopping.set()
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        emulators = CloudEmulators()
        try:
            emulators.start()
        except EmulatorMissing as exc:
            _say(str(exc))
            return 2
        try:
            env = emulators.environment(args.namespace)
            for name, value in sorted(env.items()):
                _say(f"{name}={value}")
            if not cmd:
                for name, value in sorted(env.items()):
                    print(f"export {name}={shlex.quote(value)}", flush=True)
                _say("serving until Ctrl-C")
                stopping.wait()
                return 0
            if stopping.is_set():
                return 130
            try:
                child = subprocess.Popen(cmd, env={**os.environ, **env})
            except OSError as exc:
                _say(f"cannot run {cmd[0]}: {exc.strerror}")
                return 127
            return child.wait()
        finally:
            emulators.stop()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    sys.exit(main())
