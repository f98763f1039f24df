"""``emulators/run [--namespace NS] [--sandboxes gke [--service PORT]...] -- CMD...``: start every
cloud emulator, run CMD with the environment pointing hangar at them, stop them afterwards;
exits with CMD's status.

``--sandboxes gke`` adds the Kubernetes stand-in with real pods
(:class:`~emulators.kube.cluster.StandInCluster`) and points ``HANGAR_SANDBOXES`` at it. Its
pods reach the storage front's signed port and each ``--service`` port of the host at ``127.0.0.1:PORT``,
as pods reach a cluster's Services; they show ``HANGAR_HARNESS_DIR`` (or hangar's default
harness folder) as their image's harness CLIs.

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
from urllib.parse import urlsplit

from hangar.config import Settings

from emulators.cloud import CloudEmulators
from emulators.kube.cluster import StandInCluster
from emulators.processes import EmulatorMissing


def _say(text: str) -> None:
    print(f"emulators: {text}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="emulators/run",
        description="Run CMD against the Firestore, GCS, Cloud Tasks and KMS emulators (and "
        "the Kubernetes stand-in with --sandboxes gke).",
    )
    parser.add_argument("--namespace", default="",
                        help="keep this run's data apart on the emulators (default: none)")  # fmt: skip
    parser.add_argument("--sandboxes", choices=("local", "gke"), default="local",
                        help="local: hangar's own sandboxes (default); gke: the Kubernetes "
                        "stand-in, its pods real sandboxes")  # fmt: skip
    parser.add_argument("--service", type=_port, action="append", default=[], metavar="PORT",
                        help="with --sandboxes gke: a host loopback port every pod reaches at "
                        "127.0.0.1:PORT (repeat it; the storage front's signed port is always there)")  # fmt: skip
    parser.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    args = parser.parse_args(argv)
    if args.service and args.sandboxes != "gke":
        parser.error("--service needs --sandboxes gke")
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
        cluster: StandInCluster | None = None
        try:
            emulators.start()
            if args.sandboxes == "gke":
                harnesses = Settings.from_env(os.environ).harness_dir
                # The pods reach the bucket as sandboxes do: signed URLs only, at the front's
                # signed port (fake-gcs-server's own port would take anything, unsigned).
                signed = urlsplit(emulators.gcs.signed_url).port
                assert signed is not None
                cluster = StandInCluster(harnesses, [signed, *args.service]).start()
        except EmulatorMissing as exc:
            emulators.stop()
            _say(str(exc))
            return 2
        try:
            env = emulators.environment(args.namespace)
            if cluster is not None:
                env.update(cluster.environment())
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
            if cluster is not None:
                cluster.stop()
            emulators.stop()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"not a port: {text!r}")
    return port


if __name__ == "__main__":
    sys.exit(main())
