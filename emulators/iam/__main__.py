"""``python -m emulators.iam``: serve the IAM Credentials stand-in until killed.

Prints ``iam stand-in listening on http://HOST:PORT`` (flushed) once the socket is bound, so a
parent process can read the port when it passed ``--port 0``. SIGTERM and Ctrl-C end it with
status 0; a port that cannot be bound exits with 2.
"""

from __future__ import annotations

import argparse
import sys

from emulators.processes import serve_main

from .server import IamStandIn


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m emulators.iam", description="An IAM Credentials REST stand-in (signBlob)."
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)"
    )
    parser.add_argument(
        "--port", type=int, default=8098, help="port (0 picks a free one)"
    )
    parser.add_argument(
        "--verbose", action="store_true", help="log each HTTP request to stderr"
    )
    parser.add_argument(
        "--account", action="append", default=[], metavar="EMAIL",
        help="a service account to sign for, with a new key (repeatable)",
    )
    args = parser.parse_args(argv)
    stand_in = IamStandIn(args.host, args.port, verbose=args.verbose, accounts=args.account)
    return serve_main(stand_in)


if __name__ == "__main__":
    sys.exit(main())
