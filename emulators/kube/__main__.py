"""``python -m emulators.kube``: serve the Kubernetes stand-in until killed.

Prints ``kube stand-in listening on http://HOST:PORT`` (flushed) once bound, then
``KUBECONFIG=PATH`` (the kubeconfig holding the server and its token). SIGTERM and Ctrl-C end
it with status 0; a port that cannot be bound exits with 2. ``--sandboxes DIR`` backs each pod
with a real local sandbox under ``DIR`` (pods/exec runs in it); they are destroyed on exit.
With it, ``--harnesses DIR`` is shown in each pod as its image's harness CLIs, and each
``--service PORT`` is a host loopback port every pod reaches at ``127.0.0.1:PORT``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hangar.sandboxes.local import LocalSandboxes

from emulators.processes import serve_main

from .launcher import KubeStandIn
from .pods import Knobs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m emulators.kube",
                                     description="A Kubernetes API stand-in (Agent Sandbox).")  # fmt: skip
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port (0 picks a free one)")
    parser.add_argument("--ready-delay", type=float, default=0.0, help="seconds before a pod is Ready")
    parser.add_argument("--sandboxes", metavar="DIR", type=Path,
                        help="back each pod with a local sandbox under DIR (absolute)")  # fmt: skip
    parser.add_argument("--harnesses", metavar="DIR", type=Path,
                        help="with --sandboxes: the harness CLIs' folder pods show")  # fmt: skip
    parser.add_argument("--service", metavar="PORT", type=int, action="append", default=[],
                        help="with --sandboxes: a host port pods reach at 127.0.0.1:PORT")  # fmt: skip
    parser.add_argument("--verbose", action="store_true", help="log each HTTP request to stderr")
    args = parser.parse_args(argv)
    if (args.harnesses or args.service) and not args.sandboxes:
        parser.error("--harnesses and --service need --sandboxes")
    pods = None
    if args.sandboxes:
        pods = LocalSandboxes(args.sandboxes.resolve(),
                              args.harnesses.resolve() if args.harnesses else None)  # fmt: skip
    stand_in = KubeStandIn(args.host, args.port, verbose=args.verbose,
                           knobs=Knobs(ready_delay=args.ready_delay), sandboxes=pods,
                           services=args.service)  # fmt: skip
    stand_in.bind()
    print(f"KUBECONFIG={stand_in.kubeconfig}", file=sys.stderr, flush=True)
    try:
        return serve_main(stand_in)
    finally:
        stand_in.stop()


if __name__ == "__main__":
    sys.exit(main())
