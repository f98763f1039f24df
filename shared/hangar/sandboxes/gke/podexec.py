"""Running a command in a pod through pods/exec: the fixed bootstrap and the stream's plumbing.

The ``gke://`` backend (:mod:`hangar.sandboxes.gke`) execs :data:`BOOT_ARGV` and nothing
else: what to run, as whom, with which environment and until when travels as a header on
stdin (:data:`BOOT`), so the request URL that API audit logs keep names no command, variable or
secret. Pure plumbing over the client's websocket object (no client import here).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

from hangar.errors import SandboxError
from hangar.sandboxes import HANGAR_DIR, Stdin

CHUNK = 1 << 20
"""stdin bytes per websocket message."""

BOOT = r"""
import json, os, signal, sys
def need(n):
    got = b""
    while len(got) < n:
        part = os.read(0, n - len(got))
        if not part:
            os._exit(125)
        got += part
    return got
h = json.loads(need(int(need(8))))
for path, mode, uid in (("/hangar", 0o711, 0), ("/hangar/bin", 0o755, 0),
                        ("/hangar/tmp", 0o700, 0), ("/workspace", 0o755, 1000)):
    try:
        os.mkdir(path, mode)
        os.chown(path, uid, uid)
        os.chmod(path, mode)
    except OSError:
        pass
try:
    if os.stat("/root").st_uid != 1000:
        os.chown("/root", 1000, 1000)
        os.chmod("/root", 0o700)
    with open("/etc/passwd") as f:
        known = any(line.split(":")[2:3] == ["1000"] for line in f)
    if not known:
        with open("/etc/passwd", "a") as f:
            f.write("agent:x:1000:1000:agent:/root:/bin/sh\n")
except OSError:
    pass
env = dict(h["env"])
if h["agent"]:
    try:
        with open("/hangar/env.json") as f:
            env.update(json.load(f))
    except (OSError, ValueError):
        pass
env.update(h["call"])
if h["agent"]:
    path = [p for p in env.get("PATH", "").split(":") if p and p != "/hangar/bin"]
    env["PATH"] = ":".join(["/hangar/bin"] + path)
argv = h["argv"]
pid = os.fork()
if pid == 0:
    try:
        os.setpgid(0, 0)
        for s in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_DFL)
        if h["agent"]:
            import ctypes
            os.setgroups([])
            os.setresgid(1000, 1000, 1000)
            os.setresuid(1000, 1000, 1000)
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(38, 1, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "prctl(NO_NEW_PRIVS)")
        try:
            os.chdir(h["cwd"])
        except OSError as e:
            os.write(2, ("cannot enter %s: %s\n" % (h["cwd"], e.strerror)).encode())
            os._exit(125)
        os.execvpe(argv[0], argv, env)
    except FileNotFoundError:
        os.write(2, ("%s: command not found\n" % argv[0]).encode())
        os._exit(127)
    except BaseException as e:
        os.write(2, ("%s: %s\n" % (argv[0], e)).encode())
        os._exit(126)
try:
    os.setpgid(pid, pid)
except OSError:
    pass
mark = "/hangar/tmp/exec-%s" % h["id"]
try:
    fd = os.open(mark, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, str(pid).encode())
    os.close(fd)
except OSError:
    pass
def stop(*_):
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGALRM):
    signal.signal(s, stop)
if h["timeout"] is not None:
    signal.setitimer(signal.ITIMER_REAL, max(h["timeout"], 0.001))
status = os.waitpid(pid, 0)[1]
code = os.waitstatus_to_exitcode(status)
try:
    os.unlink(mark)
except OSError:
    pass
os._exit(128 - code if code < 0 else code)
"""
"""The exec's only command line (``python3 -I -S -c BOOT``). It reads an 8-digit length,
then that many bytes of JSON (``argv``, ``env``, ``call``, ``cwd``, ``agent``, ``timeout``);
the command's environment is ``env``, then (as the agent) the spec's from :data:`ENV_FILE`,
then ``call``, with HANGAR_BIN first on the agent's PATH. It makes
hangar's folders and the agent's passwd entry if the image lacks them, and runs ``argv`` in a
process group of its own, as the agent or as hangar, with the rest of stdin as its stdin. It
kills that group at ``timeout`` seconds and on SIGTERM or SIGHUP (the runtime ending the
exec), and exits as the command did (128 + N for signal N). While the command runs,
``/hangar/tmp/exec-ID`` holds its process group (``id`` from the header), for :data:`KILL`."""

BOOT_ARGV = ["python3", "-I", "-S", "-c", BOOT]
KILL = (
    "import os, sys\n"
    "mark = '/hangar/tmp/exec-' + sys.argv[1]\n"
    "try:\n"
    "    os.killpg(int(open(mark).read()), 9)\n"
    "    os.unlink(mark)\n"
    "except (OSError, ValueError):\n"
    "    pass\n"
)
"""Kills the process group of the exec whose id is ``$1``, if it still runs: a runtime need
not kill an exec's command when its stream closes, so a cancel kills it itself."""
ENV_FILE = f"{HANGAR_DIR}/env.json"
"""The spec's env inside the pod (hangar's, 0600), written by the first exec of the process
that made the sandbox: never on the claim, whose env would make every start a cold one."""


def feed(ws: Any, header: bytes, stdin: Stdin, errors: tuple[type[BaseException], ...]) -> None:
    """Send the header, then stdin in messages of at most :data:`CHUNK` bytes, then close
    stdin (v5). A connection closed meanwhile (the command exited: one of ``errors``, the
    client's transport errors) ends it quietly."""
    quiet: tuple[type[BaseException], ...] = (*errors, AttributeError)  # the socket gone
    try:
        ws.write_channel(0, f"{len(header):08d}".encode() + header)
        for chunk in chunks(stdin):
            for start in range(0, len(chunk), CHUNK):
                ws.write_channel(0, chunk[start : start + CHUNK])
        ws.close_channel(0)
    except quiet:
        return


def chunks(stdin: Stdin) -> Iterable[bytes]:
    """stdin as byte chunks, whichever of bytes, a binary file or an iterable it is."""
    if stdin is None:
        return
    if isinstance(stdin, bytes | bytearray | memoryview):
        yield bytes(stdin)
    elif hasattr(stdin, "read"):
        reader = cast(io.BufferedIOBase, stdin)
        while chunk := reader.read(CHUNK):
            yield chunk
    else:
        yield from (bytes(c) for c in stdin if c)


def drain(ws: Any, sinks: Mapping[int, Callable[[bytes], Any]]) -> None:
    """Hand what the client has buffered on each channel to its sink (emptying the buffer)."""
    for channel, sink in sinks.items():
        data = ws.read_channel(channel)
        if data:
            sink(data)


def exit_code(raw: bytes | str, sandbox_id: str) -> int | None:
    """The exit code the channel-3 Status says; None when there is none (the exec was cut)."""
    if not raw:
        return None
    try:
        status = json.loads(raw)
    except ValueError:
        return None
    if status.get("status") == "Success":
        return 0
    causes = (status.get("details") or {}).get("causes") or []
    for cause in causes:
        if cause.get("reason") == "ExitCode":
            return int(cause.get("message", "1"))
    raise SandboxError(f"exec in sandbox {sandbox_id} failed: {status.get('message', status)}",
                       sandbox_id=sandbox_id)  # fmt: skip
