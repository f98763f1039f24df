"""``python -m emulators.firestore [--port N]``: run the Firestore emulator until killed.

Prints ``export FIRESTORE_EMULATOR_HOST=HOST:PORT`` (flushed) once it answers. SIGTERM and
Ctrl-C stop it (and its Java server) and exit 0; a missing emulator exits 2 with what to install.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from types import FrameType

from . import EmulatorUnavailable, FirestoreEmulator


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m emulators.firestore", description="Google's Firestore emulator."
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    args = parser.parse_args(argv)
    done = threading.Event()

    def _stop(signum: int, frame: FrameType | None) -> None:
        done.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        with FirestoreEmulator(args.host, args.port) as emulator:
            print(f"export FIRESTORE_EMULATOR_HOST={emulator.host}", flush=True)
            done.wait()
    except EmulatorUnavailable as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
