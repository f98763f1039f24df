"""``python -m emulators.tasks``: run the Cloud Tasks emulator on 127.0.0.1 until killed.

Prints ``cloud tasks emulator listening on 127.0.0.1:PORT`` (flushed) once it serves, then the
line to export (``HANGAR_TASKS_ENDPOINT=...``). SIGTERM and Ctrl-C stop it with status 0; a
missing emulator (run ``make tasks-emulator``) or one that does not start exits with 2.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from types import FrameType

from . import TasksEmulator, TasksEmulatorError


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m emulators.tasks", description="The Cloud Tasks emulator, on loopback."
    )
    parser.add_argument("--port", type=int, default=0, help="port (default 0: a free one)")
    parser.add_argument(
        "--queue", action="append", default=[], metavar="NAME",
        help="create projects/P/locations/L/queues/Q (repeatable)",
    )  # fmt: skip
    parser.add_argument(
        "--allow-duplicate-names", action="store_true",
        help="accept a task name seen before (the emulator's own behaviour)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    emulator = TasksEmulator(args.queue, port=args.port, dedupe=not args.allow_duplicate_names)
    try:
        emulator.start()
    except TasksEmulatorError as exc:
        print(exc, file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _interrupt)
    print(f"cloud tasks emulator listening on {emulator.host}", flush=True)
    for name, value in emulator.environment().items():
        print(f"{name}={value}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        emulator.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
