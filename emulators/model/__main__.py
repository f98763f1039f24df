"""``python -m emulators.model``: serve the model stub until killed.

Prints ``model stub listening on http://HOST:PORT`` (flushed) once the socket is bound, so a
parent process can read the port when it passed ``--port 0``. SIGTERM and Ctrl-C end it with
status 0.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path
from types import FrameType

from .scenario import ScenarioError
from .server import ModelStub


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, bind, print the listening line and serve; returns the exit status
    (2 for a bad scenario file or a port that cannot be bound)."""
    parser = argparse.ArgumentParser(
        prog="python -m emulators.model", description="A scripted model-API stub."
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8787, help="port (0 picks a free one)")
    parser.add_argument("--scenario", type=Path, help="scenario JSON file")
    parser.add_argument("--log", type=Path, help="append each request as a JSON line here")
    parser.add_argument("--verbose", action="store_true", help="log each HTTP request to stderr")
    args = parser.parse_args(argv)
    try:
        doc = json.loads(args.scenario.read_text()) if args.scenario else None
        stub = ModelStub(
            doc, host=args.host, port=args.port, log_file=args.log, verbose=args.verbose
        ).bind()
    except (OSError, json.JSONDecodeError, ScenarioError) as exc:
        print(f"model stub: {exc}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _interrupt)
    print(f"model stub listening on {stub.url}", flush=True)
    try:
        stub.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        stub.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
