"""The ``hangar`` command line: a thin surface over the REST API (its commands arrive with the
sessions work); for now it answers ``--version`` and ``--help``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from hangar import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hangar", description="A control plane for cloud coding agents."
    )
    parser.add_argument("--version", action="version", version=f"hangar {__version__}")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    return 0
