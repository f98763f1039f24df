"""``python -m emulators.cloudrun``: serve the Cloud Run stand-in until killed.

Prints ``cloud run stand-in listening on http://HOST:PORT`` (flushed) once the socket is bound,
so a parent process can read the port when it passed ``--port 0``. ``--services FILE`` loads a
JSON list of v2 Service documents first. SIGTERM and Ctrl-C end it with status 0; a port that
cannot be bound, or a services file that does not load, exits with 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from emulators.processes import serve_main

from .server import CloudRunStandIn


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m emulators.cloudrun", description="A Cloud Run Admin API v2 stand-in."
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8098, help="port (0 picks a free one)")
    parser.add_argument(
        "--services", type=Path, help="a JSON file holding a list of v2 Service documents"
    )
    parser.add_argument("--verbose", action="store_true", help="log each HTTP request to stderr")
    args = parser.parse_args(argv)
    stand_in = CloudRunStandIn(args.host, args.port, verbose=args.verbose)
    if args.services is not None:
        try:
            docs = json.loads(args.services.read_text())
            if not isinstance(docs, list) or not all(isinstance(d, dict) for d in docs):
                print(f"{args.services}: expected a JSON list of services", file=sys.stderr)
                return 2
            for doc in docs:
                stand_in.put_service(doc)
        except (OSError, ValueError) as exc:
            print(f"cannot load {args.services}: {exc}", file=sys.stderr)
            return 2
    return serve_main(stand_in)


if __name__ == "__main__":
    sys.exit(main())
