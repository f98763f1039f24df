"""Scripts that run inside sandboxes: standard library only, so any image with ``python3``,
``git`` and ``tar`` can run them (``zstd`` is used when present).

They are installed once per sandbox and then run by name with small arguments; no script's
source is ever on a command line (on Kubernetes a command is part of the exec request's URL).
:func:`archive` is every script and helper module (:data:`USES`) with a small launcher, as a tar;
:func:`install` sends it on standard input to :data:`INSTALLER` (a few lines of ``sh`` and
``tar``), which unpacks it into ``/hangar/lib/<digest>/`` and renames it into place whole:
hangar's folder, which the agent may pass through to run what is there (``pirpc``, ``context``
and ``homeconfig`` run as the agent) but can neither list nor change; named by the content, so
an upgraded hangar installs its own beside the old and never runs a stale copy. :func:`command`
is the argv that runs script ``name``: ``/hangar/lib/<digest>/launch NAME ARGS...``, the
launcher run by the sandbox's interpreter with ``-I -S`` (isolated, without site: nothing the
agent can write, such as PYTHONPATH or a module beside a script, is loaded), which imports
``hangar.agent.NAME`` from beside itself and runs its ``main()``; hangar's own runs leave
compiled bytecode there, so later runs skip compiling (on a small machine compiling them costs
a quick checkpoint a fifth of its budget). Each module is ``hangar.agent.<name>``, so ``from
hangar.agent import <module>`` works the same in a sandbox as in the tests. Their output is
untrusted data to the control plane.

Every exec of a script goes through :func:`run_script`, and the control plane keeps no note of
which sandbox has which digest: a sandbox gets the scripts as it is made
(:meth:`hangar.sessions.sandbox.Provisioner.create`), so a call costs its one exec. A sandbox
made by an older hangar lacks this digest; exec'ing the missing launcher fails before anything
runs, as a command that cannot be found or run does (status 126 or 127, the launcher's path in
the message), and :func:`run_script` then installs and runs the script once more, sending its
standard input again (the launcher never started, so a stream gave at most what the pipe held
and the chunk in flight: that much is kept, up to :data:`REPLAY_BYTES`). There is no inline
fallback: the only sandboxes without hangar's folder are those of the first layout, where
hangar's tools are root over a tmpfs root and the installer makes the folder.
"""

from __future__ import annotations

import functools
import hashlib
import io
from collections.abc import Iterable, Iterator
from importlib import resources
from typing import TYPE_CHECKING, Any, BinaryIO, cast

if TYPE_CHECKING:
    from hangar.sandboxes import ExecResult, Sandboxes, Stdin

SANDBOX_PYTHON = "/usr/bin/python3"
LIB = "/hangar/lib"
BIN = "/hangar/bin"
"""Where the install puts ``hangar-agent`` (the agent's command): first on the agent's PATH."""
AGENT_COMMAND = "hangar-agent"

USES: dict[str, tuple[str, ...]] = {
    "attach": (),
    "checkpoint": ("gitsafe", "paths", "chunking", "sealed", "manifests", "direct"),
    "context": ("gitsafe",),
    "cryptokit": (),
    "exchange": ("paths",),
    "homeconfig": ("tomltext",),
    "driver": ("commands", "run", "claudelive", "codexlive", "pilive", "gitsafe", "trees",
               "steps", "turntrees"),
    "pirpc": (),
    "restore": ("gitsafe", "paths", "quiesce", "fdtree", "sealed", "manifests", "direct"),
    "run": ("gitsafe", "trees", "turntrees"),
}
"""The scripts, each with the helper modules it uses."""

SEALING_UNAVAILABLE = 5
"""The status of a direct checkpoint or restore whose sandbox cannot seal (no ``cryptography``
that its ``python3`` loads): the control plane then moves the bytes itself."""
NOT_RUNNABLE = (126, 127)
"""The statuses of a command that cannot be run (126) or found (127), as shells and ``env``
give them: a missing launcher's."""
REPLAY_BYTES = 8 << 20
"""How much of a stream on standard input is kept to send again after a missing launcher."""
_HELD = 4096  # bytes of a caller's stderr held until the launcher is known to have run

_LAUNCH = '''#!%s -IS
"""hangar's launcher: ``launch NAME ARGS...`` runs hangar.agent.NAME's main() with ARGS as its
arguments, importing only from beside this file (hangar's folder, which the agent cannot
change) and, after the standard library, from hangar's cryptography when it is installed (the
folder the link ``crypto`` beside this file's folder names: see hangar.agent.cryptokit)."""
import os, sys
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
crypto = os.path.join(os.path.dirname(here), "crypto")
if os.path.isdir(crypto):
    sys.path.append(os.path.realpath(crypto))
name = sys.argv.pop(1) if len(sys.argv) > 1 else ""
if name not in %r:
    sys.exit("launch: no script %%r" %% name)
__import__("hangar.agent." + name)
sys.modules["hangar.agent." + name].main()
'''

INSTALLER = """set -eu
lib=$1 digest=$2 bin=$3
mkdir -p "$lib" "$bin"
chmod 711 "$lib"
if [ ! -d "$lib/$digest" ]; then
  new=$(mktemp -d "$lib/.$digest.XXXXXX")
  trap 'rm -rf -- "$new"' EXIT
  tar -x -o -f - -C "$new"
  chmod 755 "$new"
  mv -T "$new" "$lib/$digest" 2>/dev/null || [ -d "$lib/$digest" ]
fi
cp "$lib/$digest/hangar-agent" "$bin/.hangar-agent.$$"
chmod 755 "$bin/.hangar-agent.$$"
mv -f "$bin/.hangar-agent.$$" "$bin/hangar-agent"
"""
"""Reads :func:`archive` on standard input and puts it at ``LIB/DIGEST`` (its first two
arguments), whole or not at all, unless that digest is there already (then it only fixes the
folder's mode: an older hangar made it 0700); then puts its ``hangar-agent`` at ``BIN`` (the
third), replacing whatever an older hangar put there, by a rename. Idempotent; two at once are
fine (the second rename fails and finds the first's)."""


@functools.cache
def source(name: str) -> str:
    """The source of ``hangar/agent/<name>.py``."""
    return resources.files(__package__).joinpath(f"{name}.py").read_text()


@functools.cache
def _files() -> dict[str, str]:
    modules = sorted({m for script, uses in USES.items() for m in (script, *uses)})
    files = {"launch": _LAUNCH % (SANDBOX_PYTHON, tuple(sorted(USES))),
             "hangar/__init__.py": "", "hangar/agent/__init__.py": "",
             AGENT_COMMAND: f"#!{SANDBOX_PYTHON} -IS\n" + source("hangar_agent")}  # fmt: skip
    files.update({f"hangar/agent/{m}.py": source(m) for m in modules})
    return files


@functools.cache
def digest() -> str:
    """The installed scripts' name: a hash of every file of :func:`archive`."""
    h = hashlib.sha256()
    for path, text in sorted(_files().items()):
        data = text.encode()
        h.update(f"{path}\0{len(data)}\0".encode() + data)
    return h.hexdigest()[:20]


@functools.cache
def archive() -> bytes:
    """The scripts as the installer reads them: a tar, folders 0755, files 0644, the launcher
    0755, fixed times (the same bytes every time)."""
    import tarfile

    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for folder in ("hangar", "hangar/agent"):
            info = tarfile.TarInfo(folder)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 1 << 30
            tar.addfile(info)
        for path, text in sorted(_files().items()):
            data = text.encode()
            info = tarfile.TarInfo(path)
            info.size, info.mtime = len(data), 1 << 30
            info.mode = 0o755 if path in ("launch", AGENT_COMMAND) else 0o644
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def launcher(lib: str = LIB) -> str:
    """Where the launcher of this hangar's scripts is in a sandbox."""
    return f"{lib}/{digest()}/launch"


def command(name: str, *args: str, lib: str = LIB) -> list[str]:
    """The argv that runs script ``name`` with ``args`` inside a sandbox (once installed)."""
    if name not in USES:
        raise ValueError(f"no in-sandbox script {name!r}")
    return [launcher(lib), name, *args]


def installer(lib: str = LIB) -> list[str]:
    """The argv that installs :func:`archive`, given on its standard input, under ``lib``."""
    return ["/bin/sh", "-c", INSTALLER, "sh", lib, digest(), BIN]


def install(sandboxes: Sandboxes, sandbox_id: str) -> None:
    """Install this hangar's scripts in the sandbox, and its ``hangar-agent`` at :data:`BIN`
    (one exec, as hangar); the scripts are left as they are when this digest is there already.
    SandboxError if it fails."""
    from hangar.errors import SandboxError
    from hangar.sandboxes import SandboxUser

    result = sandboxes.exec(sandbox_id, installer(), stdin=archive(), user=SandboxUser.HANGAR,
                            timeout=120)  # fmt: skip
    if not result.ok:
        raise SandboxError(f"cannot install hangar's scripts in sandbox {sandbox_id}: "
                           f"{result.stderr.decode(errors='replace').strip()[-300:]}",
                           sandbox_id=sandbox_id)  # fmt: skip


def run_script(
    sandboxes: Sandboxes, sandbox_id: str, name: str, *args: str, stdin: Stdin = None,
    stderr: BinaryIO | None = None, **options: Any,
) -> ExecResult:  # fmt: skip
    """Run script ``name`` with ``args`` in the sandbox: ``sandboxes.exec`` of
    :func:`command` with the other options as given (``user``, ``stdout``, ``timeout``, ...).
    When the sandbox lacks this hangar's scripts (see the module doc), installs them and runs
    it once more, with the same standard input; SandboxError if the install fails or a stream
    on standard input gave more than :data:`REPLAY_BYTES` before the launcher was found
    missing. Raises what ``exec`` raises."""
    argv = command(name, *args)
    replay = _Replay(stdin)
    held = None if stderr is None else _Held(stderr)
    result = sandboxes.exec(sandbox_id, argv, stdin=replay.first(), stderr=cast(Any, held),
                            **options)  # fmt: skip
    seen = result.stderr if held is None else b"" if held.passing else held.head
    if result.exit_code not in NOT_RUNNABLE or launcher().encode() not in seen:
        if held is not None:
            held.release()
        return result
    install(sandboxes, sandbox_id)
    return sandboxes.exec(sandbox_id, argv, stdin=replay.again(), stderr=stderr, **options)


class _Replay:
    """Standard input that can be sent a second time: bytes as they are; a file or a stream of
    chunks through a copy of the chunks the first attempt took, up to REPLAY_BYTES."""

    def __init__(self, stdin: Stdin) -> None:
        self.stdin = stdin
        self.source: Iterator[bytes] | None = None
        self.taken: list[bytes] | None = []
        self.size = 0
        self.again_asked = False

    def first(self) -> Stdin:
        if self.stdin is None or isinstance(self.stdin, (bytes, bytearray, memoryview)):
            return self.stdin
        if hasattr(self.stdin, "read"):
            stream: Any = self.stdin
            self.source = iter(lambda: stream.read(1 << 20), b"")
        else:
            self.source = iter(self.stdin)
        return self._recorded(self.source)

    def _recorded(self, source: Iterator[bytes]) -> Iterable[bytes]:
        for chunk in source:
            if self.taken is not None:
                self.taken.append(chunk)
                self.size += len(chunk)
                if self.size > REPLAY_BYTES:
                    self.taken = None
            yield chunk
            if self.again_asked:
                return

    def again(self) -> Stdin:
        if self.source is None:
            return self.stdin
        self.again_asked = True
        if self.taken is None:
            from hangar.errors import SandboxError

            raise SandboxError("a script's launcher was missing after its input had streamed "
                               f"past {REPLAY_BYTES} bytes; it cannot be sent again")  # fmt: skip
        return _chain(self.taken, self.source)


def _chain(taken: list[bytes], rest: Iterator[bytes]) -> Iterator[bytes]:
    yield from taken
    yield from rest


class _Held:
    """A caller's stderr file, written only once the launcher is known to have run: up to
    _HELD bytes are held (a missing launcher's message is one line), then it passes through."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.head = b""
        self.passing = False

    def write(self, data: bytes) -> int:
        if self.passing:
            return self.out.write(data)
        self.head += data
        if len(self.head) > _HELD:
            self.release()
        return len(data)

    def release(self) -> None:
        if not self.passing:
            self.passing = True
            self.out.write(self.head)
