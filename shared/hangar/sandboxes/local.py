"""Local sandboxes: long-lived bubblewrap namespaces, one folder each under a root folder.

``<root>/<id>/`` holds ``record.json`` (written atomically once the sandbox runs), ``home/``
(bound at ``/root``, HOME), ``workspace/`` (``/workspace``), ``tmp/`` (``/tmp``) and
``init.log`` (bubblewrap's messages). bubblewrap runs as root in its own session (``setsid -f``,
no ``--die-with-parent``), so a sandbox outlives the process that made it; PID 1 inside is a
small reaper. The record keeps the init's host pid and start time: a sandbox is live while its
record exists and that very process runs (a reused pid never passes); ``get`` and ``list``
remove records whose init is gone.

Inside: a tmpfs root, ``/usr``, ``/etc``, ``/opt`` read-only (``/bin`` and the like mirrored
from the host), its own ``/proc``, ``/dev``, ``/dev/shm``, HOME, ``/workspace`` and ``/tmp``,
the harness folder read-only at :data:`HARNESS_MOUNT`, each ``ro_paths`` entry read-only at its
own path, and the host's network; nothing else of the host. Every exec enters with ``nsenter``,
drops every capability with ``setpriv`` (nsenter does not inherit bubblewrap's drop) and runs
the command under ``env -i``, so no host variable leaks in.

Limits: the host's network namespace is shared (a sandbox reaches the host's loopback services
and other sandboxes' abstract sockets); no memory or process limit; files written on the tmpfs
root outside the bound folders use RAM.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO, cast
from urllib.parse import unquote, urlsplit

from pydantic import BaseModel, ConfigDict, ValidationError

from hangar.config import Settings
from hangar.errors import ExecTimeout, InvalidInput, InvalidSettings, SandboxError
from hangar.errors import SandboxNotFound, SandboxUnavailable
from hangar.sandboxes import HOME, WORKSPACE, ExecResult, PreDestroyHook, SandboxInfo
from hangar.sandboxes import SandboxSpec, Stdin
from hangar.sandboxes.processes import HOST_ENV, feed, host_tool, kill, kill_tree, pump
from hangar.sandboxes.processes import read_some, start_time

logger = logging.getLogger(__name__)

HARNESS_MOUNT = "/hangar/harnesses"
"""Where the harness folder appears inside; its ``bin/`` and ``node_modules/.bin/`` are on PATH."""

SANDBOX_PATH = (
    f"{HARNESS_MOUNT}/bin:{HARNESS_MOUNT}/node_modules/.bin:/usr/local/bin:/usr/bin:/bin"
)

_ID = re.compile(r"sbx-[0-9a-f]{8}\Z")
_RECORD = "record.json"
_START_TIMEOUT = 10.0  # seconds for bubblewrap to report and the init to run
_KILL_TIMEOUT = 10.0  # seconds for a killed init to be gone
_SYSTEM_DIRS = ("/usr", "/etc", "/opt")
_SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
_BOUND = ("/proc", "/dev", HOME, WORKSPACE, "/tmp")
_OWN_MOUNTS = ("/", *_SYSTEM_DIRS, *_BOUND, "/hangar")

# PID 1 inside: report readiness on the fd it is given, then reap every orphan for ever.
_INIT = """\
import os, signal
os.write({fd}, b"r")
os.close({fd})
signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGCHLD}})
while True:
    try:
        os.waitpid(-1, 0)
    except ChildProcessError:
        signal.sigwait({{signal.SIGCHLD}})
"""

# put_file: write beside the target, then rename, so a reader never sees half a file.
_PUT = (
    'set -e; t="$1.hangar-put.$$"; trap \'rm -f -- "$t"\' EXIT; '
    'mkdir -p -- "$(dirname -- "$1")"; cat > "$t"; chmod -- "$2" "$t"; mv -fT -- "$t" "$1"; '
    "trap - EXIT"
)


class _Record(BaseModel):
    """What ``record.json`` holds; the init's start time guards against pid reuse."""

    model_config = ConfigDict(frozen=True)

    id: str
    labels: dict[str, str]
    created_at: datetime
    init_pid: int
    init_start_time: int
    env: dict[str, str]

    def info(self) -> SandboxInfo:
        created_at = self.created_at.astimezone(UTC)
        return SandboxInfo(id=self.id, labels=dict(self.labels), created_at=created_at)


class LocalSandboxes:
    """The ``local:`` backend of :class:`hangar.sandboxes.Sandboxes` (runs as root).

    ``root`` holds one folder per sandbox; ``harness_dir`` (if it exists) is shown read-only at
    :data:`HARNESS_MOUNT`. ``bwrap`` overrides the bubblewrap binary (default: found on PATH at
    ``create``); a missing one makes ``create`` raise :class:`SandboxUnavailable`.
    """

    def __init__(self, root: Path, harness_dir: Path | None = None, *, bwrap: str | None = None):
        self.root = Path(root)
        self.harness_dir = harness_dir
        self._bwrap = bwrap
        self._hooks: list[PreDestroyHook] = []

    @classmethod
    def from_url(cls, url: str, settings: Settings) -> LocalSandboxes:
        """``local:///ABS/PATH`` -> sandboxes under that folder. InvalidSettings otherwise."""
        parts = urlsplit(url)
        path = unquote(parts.path)
        if parts.scheme != "local" or parts.netloc or not path.startswith("/"):
            raise InvalidSettings(
                f"HANGAR_SANDBOXES: expected local:///ABSOLUTE/PATH, got {url!r}",
                setting="HANGAR_SANDBOXES",
            )
        return cls(Path(path), settings.harness_dir)

    # -- the port ---------------------------------------------------------------------------

    def create(self, spec: SandboxSpec) -> SandboxInfo:
        """Start a sandbox; returns once it accepts exec (about 30 ms).

        Raises SandboxUnavailable when bubblewrap or util-linux tools are missing, InvalidInput
        for a bad ``ro_paths`` entry or env name, and SandboxError when bubblewrap fails.
        """
        tools = self._tools()
        ro_paths = [self._check_ro_path(p) for p in spec.ro_paths]
        env = _check_env(spec.env)
        sandbox_id, folder = self._new_folder()
        record: _Record | None = None
        try:
            for name, mode in (("home", 0o700), ("workspace", 0o755), ("tmp", 0o1777)):
                (folder / name).mkdir()
                os.chmod(folder / name, mode)  # after mkdir: the umask would mask the bits
            pid, started = self._start(tools, folder, sandbox_id, ro_paths)
            record = _Record(
                id=sandbox_id,
                labels=dict(spec.labels),
                created_at=datetime.now(UTC),
                init_pid=pid,
                init_start_time=started,
                env=env,
            )
            _write_atomically(folder / _RECORD, record.model_dump_json(indent=2).encode())
        except BaseException as exc:
            _kill_and_remove(folder, record)
            if isinstance(exc, OSError):
                raise SandboxError(f"cannot create a sandbox in {self.root}: {exc}") from exc
            raise
        return record.info()

    def get(self, sandbox_id: str) -> SandboxInfo:
        """The live sandbox ``sandbox_id``; SandboxNotFound if it is missing or dead."""
        return self._live_record(sandbox_id).info()

    def list(self, labels: Mapping[str, str] | None = None) -> list[SandboxInfo]:
        """Live sandboxes whose labels include every given pair, oldest first."""
        try:
            names = [e.name for e in os.scandir(self.root) if _ID.match(e.name)]
        except FileNotFoundError:
            return []
        found: list[_Record] = []
        for name in names:
            record = self._read_record(name)
            if record is None:
                continue  # being created, or not ours
            if not _is_live(record):
                _kill_and_remove(self.root / name, None)
                continue
            if all(record.labels.get(k) == v for k, v in (labels or {}).items()):
                found.append(record)
        found.sort(key=lambda r: (r.created_at, r.id))
        return [r.info() for r in found]

    def exec(
        self,
        sandbox_id: str,
        argv: Sequence[str],
        *,
        stdin: Stdin = None,
        stdout: BinaryIO | None = None,
        stderr: BinaryIO | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
    ) -> ExecResult:
        """Run ``argv`` to completion in the sandbox (cwd defaults to HOME).

        The environment is HOME, PATH and LANG, then the spec's env, then ``env``. Output that
        background processes keep writing after the command exits is read for at most
        :data:`~hangar.sandboxes.processes.DRAIN_GRACE` seconds. A command killed by signal N
        exits 128 + N. A timeout kills the command and every process it started that is still
        its descendant, then raises ExecTimeout. SandboxNotFound if the sandbox is missing or
        dies meanwhile.
        """
        if not argv:
            raise InvalidInput("exec needs a command")
        if "=" in argv[0]:
            raise InvalidInput(f"command name {argv[0]!r} must not contain '='")
        record = self._live_record(sandbox_id)
        full_env = {"HOME": HOME, "PATH": SANDBOX_PATH, "LANG": "C.UTF-8"}
        full_env.update(record.env)
        full_env.update(_check_env(env or {}))
        nsenter = host_tool("nsenter") or "nsenter"
        command = [nsenter, "--target", str(record.init_pid), "--mount", "--pid", "--uts"]
        command += ["--ipc", "--", "/usr/bin/setpriv", "--bounding-set=-all", "--inh-caps=-all"]
        command += ["--ambient-caps=-all", "--no-new-privs", "--", "/usr/bin/env", "-i"]
        command += ["-C", cwd or HOME, *(f"{k}={v}" for k, v in full_env.items()), *argv]
        out: list[bytes] = []
        err: list[bytes] = []
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # its own process group, so a timeout can kill it all
                env=HOST_ENV,
            )
        except OSError as exc:
            raise SandboxUnavailable(f"cannot run nsenter: {exc}", tool="nsenter") from exc
        errors: list[Exception] = []
        writer = None
        if stdin is not None:
            writer = threading.Thread(target=feed, args=(proc.stdin, stdin, errors), daemon=True)
            writer.start()
        try:
            assert proc.stdout is not None and proc.stderr is not None
            streams: dict[int, Callable[[bytes], Any]] = {
                proc.stdout.fileno(): out.append if stdout is None else stdout.write,
                proc.stderr.fileno(): err.append if stderr is None else stderr.write,
            }
            if not pump(proc, streams, deadline):
                raise subprocess.TimeoutExpired(command, timeout or 0)
            proc.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            kill_tree(proc)
            message = f"{argv[0]} timed out after {timeout} s in sandbox {sandbox_id}"
            raise ExecTimeout(
                message, sandbox_id=sandbox_id, argv=list(argv), timeout=timeout
            ) from None
        finally:
            if proc.poll() is None:
                kill_tree(proc)
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
            if writer is not None:
                writer.join(1.0)  # the feeder closes stdin itself
        if errors:
            raise errors[0]
        code = proc.returncode
        if code != 0 and not _is_live(record):
            raise SandboxNotFound(f"sandbox {sandbox_id} is gone", sandbox_id=sandbox_id)
        return ExecResult(128 - code if code < 0 else code, b"".join(out), b"".join(err))

    def put_file(
        self, sandbox_id: str, path: str, data: bytes | BinaryIO, *, mode: int = 0o644
    ) -> None:
        """Write a file (parents made as needed), replacing any file at ``path`` atomically."""
        argv = ["/bin/sh", "-c", _PUT, "sh", path, format(mode & 0o7777, "o")]
        result = self.exec(sandbox_id, argv, stdin=data)
        if not result.ok:
            message = f"cannot write {path} in sandbox {sandbox_id}: {_tail(result.stderr)}"
            raise SandboxError(message, sandbox_id=sandbox_id, path=path)

    def get_file(self, sandbox_id: str, path: str, out: BinaryIO) -> int:
        """Copy a file's bytes to ``out``; returns the count. SandboxError if it is missing."""
        counter = _Counter(out)
        result = self.exec(sandbox_id, ["cat", "--", path], stdout=cast(BinaryIO, counter))
        if not result.ok:
            message = f"cannot read {path} in sandbox {sandbox_id}: {_tail(result.stderr)}"
            raise SandboxError(message, sandbox_id=sandbox_id, path=path)
        return counter.count

    def destroy(self, sandbox_id: str, *, hooks: bool = True) -> None:
        """Run the hooks (if live and ``hooks``), kill every process in it, remove its folder.

        Idempotent. A hook that raises is logged and the destroy goes on. SandboxError if the
        init outlives SIGKILL for :data:`_KILL_TIMEOUT` seconds (the folder is then kept).
        """
        record = self._read_record(sandbox_id) if _ID.match(sandbox_id) else None
        if record is None:
            return
        if hooks and _is_live(record):
            info = record.info()
            for hook in list(self._hooks):
                try:
                    hook(info)
                except Exception:  # a hook must never keep a sandbox alive
                    logger.exception("pre-destroy hook %r failed for %s", hook, sandbox_id)
        _kill_and_remove(self.root / sandbox_id, record)

    def add_pre_destroy_hook(self, hook: PreDestroyHook) -> None:
        """Run ``hook(info)`` before every destroy, in the order added."""
        self._hooks.append(hook)

    # -- starting ----------------------------------------------------------------------------

    def _new_folder(self) -> tuple[str, Path]:
        try:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            while True:
                sandbox_id = f"sbx-{secrets.token_hex(4)}"
                try:
                    (self.root / sandbox_id).mkdir(mode=0o700)
                    return sandbox_id, self.root / sandbox_id
                except FileExistsError:
                    continue  # a clash of random ids: draw again
        except OSError as exc:
            raise SandboxError(f"cannot create a sandbox in {self.root}: {exc}") from exc

    def _tools(self) -> dict[str, str]:
        bwrap = self._bwrap or shutil.which("bwrap")
        if not bwrap or not os.access(bwrap, os.X_OK):
            raise SandboxUnavailable(
                f"bubblewrap (bwrap) is not installed{f' at {bwrap}' if bwrap else ''}; "
                "run `make install` (or `apt-get install bubblewrap`) and run hangar as root",
                tool="bwrap",
            )
        tools = {"bwrap": bwrap}
        for name in ("setsid", "nsenter"):
            found = host_tool(name)
            if found is None:
                raise SandboxUnavailable(f"{name} (util-linux) is not installed", tool=name)
            tools[name] = found
        return tools

    def _check_ro_path(self, raw: str) -> str:
        path = os.path.normpath(raw)
        if not path.startswith("/") or not os.path.exists(path):
            raise InvalidInput(f"ro_paths entry {raw!r} is not an existing absolute path")
        real = PurePosixPath(os.path.realpath(path))
        root = PurePosixPath(os.path.realpath(self.root))
        if real.is_relative_to(root) or root.is_relative_to(real):
            raise InvalidInput(f"ro_paths entry {raw!r} would show the sandboxes folder")
        if _under(path, ("/proc", "/dev")) or any(_under(own, [path]) for own in _OWN_MOUNTS):
            raise InvalidInput(f"ro_paths entry {raw!r} would hide the sandbox's own folders")
        return path

    def _start(
        self, tools: Mapping[str, str], folder: Path, sandbox_id: str, ro_paths: Sequence[str]
    ) -> tuple[int, int]:
        """Start bubblewrap detached; return the init's host pid and start time once it runs."""
        info_r, info_w = os.pipe()
        ready_r, ready_w = os.pipe()
        try:
            argv = [tools["setsid"], "--fork", tools["bwrap"]]
            argv += _bwrap_args(folder, sandbox_id, ro_paths, self.harness_dir)
            argv += ["--info-fd", str(info_w), "/usr/bin/python3", "-I", "-c"]
            argv.append(_INIT.format(fd=ready_w))
            with open(folder / "init.log", "wb") as log:
                try:
                    # setsid forks bwrap off and exits at once: no child of ours lingers.
                    subprocess.run(
                        argv,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=log,
                        pass_fds=(info_w, ready_w),
                        env=HOST_ENV,
                        check=True,
                        timeout=_START_TIMEOUT,
                    )
                except (OSError, subprocess.SubprocessError) as exc:
                    raise SandboxError(f"cannot start bubblewrap: {exc}") from exc
            os.close(info_w)
            os.close(ready_w)
            info_w = ready_w = -1
            deadline = time.monotonic() + _START_TIMEOUT
            info = _read_json(info_r, deadline)
            pid = info.get("child-pid") if info else None
            if not isinstance(pid, int):
                raise SandboxError(f"bubblewrap failed: {_log_text(folder)}")
            try:
                started = start_time(pid) if _read_some(ready_r, deadline) == b"r" else None
                if started is None:
                    raise SandboxError(f"sandbox init did not start: {_log_text(folder)}")
            except BaseException:
                kill(pid)
                raise
            return pid, started
        finally:
            for fd in (info_r, info_w, ready_r, ready_w):
                if fd >= 0:
                    os.close(fd)

    # -- records and liveness ----------------------------------------------------------------

    def _read_record(self, sandbox_id: str) -> _Record | None:
        try:
            return _Record.model_validate_json((self.root / sandbox_id / _RECORD).read_bytes())
        except (FileNotFoundError, NotADirectoryError):
            return None
        except (OSError, ValidationError) as exc:
            logger.warning("unreadable sandbox record %s: %s", sandbox_id, exc)
            return None

    def _live_record(self, sandbox_id: str) -> _Record:
        record = self._read_record(sandbox_id) if _ID.match(sandbox_id) else None
        if record is not None and not _is_live(record):
            _kill_and_remove(self.root / sandbox_id, None)
            record = None
        if record is None:
            raise SandboxNotFound(f"no sandbox {sandbox_id}", sandbox_id=sandbox_id)
        return record


def _bwrap_args(
    folder: Path, sandbox_id: str, ro_paths: Sequence[str], harness_dir: Path | None
) -> list[str]:
    """bubblewrap's options for a sandbox (everything but the command and its info fd)."""
    args = ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--share-net"]
    args += ["--cap-drop", "ALL", "--as-pid-1", "--hostname", sandbox_id, "--tmpfs", "/"]
    for d in _SYSTEM_DIRS:
        if os.path.isdir(d) and not os.path.islink(d):
            args += ["--ro-bind", d, d]
    for d in _SYSTEM_LINKS:
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/dev/shm"]
    args += ["--bind", str(folder / "home"), HOME]
    args += ["--bind", str(folder / "workspace"), WORKSPACE]
    args += ["--bind", str(folder / "tmp"), "/tmp"]
    made: set[str] = set()
    extra = list(ro_paths)
    resolv = os.path.realpath("/etc/resolv.conf")  # often a link into /run
    if os.path.exists(resolv) and not _under(resolv, _SYSTEM_DIRS):
        extra.append(resolv)
    if harness_dir is not None and harness_dir.is_dir():
        args += _parents(HARNESS_MOUNT, made)
        args += ["--ro-bind", str(harness_dir), HARNESS_MOUNT]
    for path in extra:
        args += _parents(path, made)
        args += ["--ro-bind", path, path]
    return args + ["--chdir", HOME]


class _Counter:
    """Counts the bytes written through it to ``out``."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.count = 0

    def write(self, data: bytes) -> int:
        self.count += len(data)
        return self.out.write(data)


def _is_live(record: _Record) -> bool:
    return start_time(record.init_pid) == record.init_start_time


def _kill_and_remove(folder: Path, record: _Record | None) -> None:
    """Kill the init of ``record`` (if given and live), wait until it is gone, remove the folder."""
    if record is not None and _is_live(record):
        kill(record.init_pid)
        deadline = time.monotonic() + _KILL_TIMEOUT
        pause = 0.001
        while _is_live(record):
            if time.monotonic() > deadline:
                raise SandboxError(
                    f"sandbox {record.id} outlived SIGKILL", sandbox_id=record.id
                )
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
    try:
        _remove_tree(folder)
    except OSError as exc:
        raise SandboxError(f"cannot remove sandbox folder {folder}: {exc}") from exc


def _check_env(env: Mapping[str, str]) -> dict[str, str]:
    for name, value in env.items():
        if not name or "=" in name or "\0" in name or "\0" in value:
            raise InvalidInput(f"invalid environment variable {name!r}")
    return dict(env)


def _parents(path: str, made: set[str]) -> list[str]:
    """``--dir`` ops making the missing parents of ``path`` traversable (bwrap makes 0700)."""
    args: list[str] = []
    for parent in reversed(PurePosixPath(path).parents):
        p = str(parent)
        if p == "/" or p in made or p in _BOUND or _under(p, _SYSTEM_DIRS):
            continue
        made.add(p)
        args += ["--perms", "0755", "--dir", p]
    return args


def _under(path: str, folders: Sequence[str]) -> bool:
    return any(PurePosixPath(path).is_relative_to(f) for f in folders)


def _read_some(fd: int, deadline: float) -> bytes:
    """One read from ``fd`` (b"" at EOF); SandboxError if nothing comes before the deadline."""
    try:
        return read_some(fd, deadline)
    except TimeoutError:
        raise SandboxError("sandbox did not start in time") from None


def _read_json(fd: int, deadline: float) -> dict[str, Any] | None:
    """Read bubblewrap's info JSON (it closes the fd after it); None if it failed first."""
    buf = b""
    while chunk := _read_some(fd, deadline):
        buf += chunk
    try:
        value = json.loads(buf)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _remove_tree(folder: Path) -> None:
    """Remove a sandbox folder, making read-only folders writable on the way (as a non-root)."""

    def retry(func: Callable[..., Any], path: str, exc_info: Any) -> None:
        exc = exc_info[1]
        if isinstance(exc, FileNotFoundError):
            return  # removed meanwhile by another destroy or list
        if not isinstance(exc, PermissionError) or func not in (os.rmdir, os.unlink):
            raise exc
        os.chmod(os.path.dirname(path), 0o700)
        func(path)

    if os.path.lexists(folder):
        shutil.rmtree(folder, onerror=retry)


def _tail(data: bytes) -> str:
    return data.decode(errors="replace").strip()[-2000:]


def _log_text(folder: Path) -> str:
    try:
        return (folder / "init.log").read_text(errors="replace").strip() or "(no output)"
    except OSError:
        return "(no log)"
