"""Google's Firestore emulator, started and stopped from Python.

``FirestoreEmulator`` runs ``gcloud emulators firestore start --host-port=127.0.0.1:PORT`` on a
free port, waits until it answers, and kills it (and the Java process it starts) on exit::

    with FirestoreEmulator() as emulator:
        os.environ.update(emulator.environment())   # FIRESTORE_EMULATOR_HOST=127.0.0.1:PORT
        ...                                          # the official client talks to it
        emulator.reset("my-project")                 # empty the project's default database

The emulator is a Java program under the Google Cloud CLI: it needs the
``google-cloud-cli-firestore-emulator`` package (or ``gcloud components install
cloud-firestore-emulator``) and Java 17 or newer. When either is missing,
:class:`EmulatorUnavailable` says what to install. Standard library only.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Final, Self

from emulators.processes import Emulator, EmulatorMissing, free_port

__all__ = ["EmulatorUnavailable", "FirestoreEmulator", "INSTALL_HINT"]

INSTALL_HINT: Final = (
    "install the Firestore emulator: the Debian package google-cloud-cli-firestore-emulator "
    "(or `gcloud components install cloud-firestore-emulator`) and Java 17 or newer "
    "(e.g. openjdk-17-jre-headless)"
)
_COMPONENT: Final = Path("platform") / "cloud-firestore-emulator"
_STOP_SECONDS: Final = 10.0
_POLL_SECONDS: Final = 0.05


class EmulatorUnavailable(EmulatorMissing):
    """The emulator cannot run here (gcloud, its Firestore component or Java is missing), or it
    did not come up; the message says what to install or where its log is."""


def _sdk_root(gcloud: str) -> Path:
    """The Cloud SDK folder of a ``gcloud`` on PATH (``.../google-cloud-sdk/bin/gcloud``)."""
    return Path(os.path.realpath(gcloud)).parent.parent


def check_installed() -> str:
    """The path of ``gcloud``, once gcloud, its Firestore emulator component and Java are all
    found; EmulatorUnavailable naming what is missing otherwise."""
    gcloud = shutil.which("gcloud")
    if gcloud is None:
        raise EmulatorUnavailable(f"gcloud is not on PATH: {INSTALL_HINT}")
    if not (_sdk_root(gcloud) / _COMPONENT).is_dir():
        raise EmulatorUnavailable(
            f"the gcloud at {gcloud} has no Firestore emulator component "
            f"({_sdk_root(gcloud) / _COMPONENT} is missing): {INSTALL_HINT}"
        )
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise EmulatorUnavailable(f"java is not on PATH: {INSTALL_HINT}")
    return gcloud


class FirestoreEmulator(Emulator):
    """One emulator process group. ``start()`` returns once it answers HTTP; ``stop()`` ends
    the whole group (gcloud, its shell wrapper and the Java server). A context manager too.

    ``port=0`` picks a free port. ``startup_timeout`` bounds the wait for the first answer
    (it usually takes 2.5 to 5 s)."""

    def __init__(
        self, host: str = "127.0.0.1", port: int = 0, *, startup_timeout: float = 60.0
    ) -> None:
        self._bind = host
        self._port = port
        self.startup_timeout = startup_timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._logdir: tempfile.TemporaryDirectory[str] | None = None

    @property
    def host(self) -> str:
        """``HOST:PORT``, what ``FIRESTORE_EMULATOR_HOST`` takes."""
        if self._proc is None:
            raise RuntimeError("the Firestore emulator is not started")
        return f"{self._bind}:{self._port}"

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    def environment(self) -> dict[str, str]:
        """The variables that point the official clients at this emulator."""
        return {"FIRESTORE_EMULATOR_HOST": self.host}

    @property
    def log(self) -> Path | None:
        """The emulator's combined output, while it runs."""
        return None if self._logdir is None else Path(self._logdir.name) / "emulator.log"

    def start(self) -> Self:
        if self._proc is not None:
            return self
        gcloud = check_installed()
        if self._port == 0:
            self._port = free_port(self._bind)
        self._logdir = tempfile.TemporaryDirectory(prefix="firestore-emulator-")
        assert self.log is not None
        with self.log.open("wb") as out:
            # Its own session (and so process group): stop() ends gcloud and the Java server it
            # starts together, and a Ctrl-C at the terminal does not reach it half-way.
            self._proc = subprocess.Popen(
                [gcloud, "--quiet", "emulators", "firestore", "start",
                 f"--host-port={self._bind}:{self._port}"],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.startup_timeout
        while True:
            try:
                with urllib.request.urlopen(self.url + "/", timeout=1) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            if self._proc.poll() is not None:
                raise EmulatorUnavailable(
                    f"the Firestore emulator exited with status {self._proc.returncode} while "
                    f"starting: {self._tail()}\n(if a component is missing: {INSTALL_HINT})"
                )
            if time.monotonic() > deadline:
                raise EmulatorUnavailable(
                    f"the Firestore emulator did not answer on {self.host} within "
                    f"{self.startup_timeout:g} s: {self._tail()}"
                )
            time.sleep(_POLL_SECONDS)

    def _tail(self) -> str:
        try:
            text = self.log.read_text(errors="replace") if self.log else ""
        except OSError:
            return "(no log)"
        return text[-2000:].strip() or "(no output)"

    def reset(self, project: str, database: str = "(default)") -> None:
        """Delete every document of the project's database (the emulator's own endpoint)."""
        path = "/emulator/v1/projects/{}/databases/{}/documents".format(
            urllib.parse.quote(project, safe=""), urllib.parse.quote(database, safe="()")
        )
        request = urllib.request.Request(self.url + path, method="DELETE")
        with urllib.request.urlopen(request, timeout=30) as answer:
            answer.read()

    def stop(self) -> None:
        """Kill the process group and wait (bounded) until it is empty. Idempotent.

        SIGKILL at once: the emulator keeps its data in memory only, so there is nothing to
        shut down gracefully, and the Java server spends about 2 s on a SIGTERM."""
        proc, self._proc = self._proc, None
        if proc is not None:
            group = proc.pid  # start_new_session: the group id is gcloud's pid
            _signal_group(group, signal.SIGKILL)
            proc.wait()
            # gcloud's children (the Java server) are reparented to init; wait until none of
            # the group is alive (zombies waiting for init to reap them count as gone).
            deadline = time.monotonic() + _STOP_SECONDS
            while _group_alive(group) and time.monotonic() < deadline:
                _signal_group(group, signal.SIGKILL)
                time.sleep(_POLL_SECONDS)
        if self._logdir is not None:
            self._logdir.cleanup()
            self._logdir = None



def _signal_group(group: int, signum: int) -> bool:
    """Send ``signum`` to the process group; False once the group has no process left."""
    try:
        os.killpg(group, signum)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - the group id was reused by someone else
        return False
    return True


def _group_alive(group: int) -> bool:
    """Whether a live (not zombie) process is left in the group; from /proc where there is one."""
    proc = Path("/proc")
    if not proc.is_dir():  # pragma: no cover - not Linux
        return _signal_group(group, 0)
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == group and fields[0] not in ("Z", "X"):
            return True
    return False
