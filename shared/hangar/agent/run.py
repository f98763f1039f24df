"""Supervise one detached run inside a sandbox. Standard library only (a one-shot turn's trees
import hangar's standard-library tree modules, beside this one); run as hangar's user
(uid 0 of the sandbox) as ``run RUN_DIR`` (:func:`hangar.agent.command`), or as ``run RUN_DIR -``
to have the three files below written from a JSON request on standard input first
(``{"spec": ..., "env": ..., "stdin": BASE64 or null}``: one exec starts a run; refused when
RUN_DIR has a run already).

RUN_DIR (hangar's, out of the agent's reach) holds, written by the control plane::

    spec.json   {"argv": [...], "cwd": "..."}: the command and where it runs; optionally
                "stdin": "pipe" (input stays open for later writes, see ``input``) and
                "tty": {"rows": R, "cols": C, "term": T} (a pseudo terminal, below);
                "as": "hangar" runs it as this process's user, with the agent's environment
                (a live turn's driver, :mod:`hangar.agent.driver`, which starts the agent's
                CLI as the agent itself); "control": true makes the run's control folder
                ``ctl/`` (its ``tmp/`` and ``in/``, mode 0700: :mod:`hangar.agent.commands`)
                before the command starts, so a command can land as soon as the run is seen;
                "trees": {"repo": DIR, "slow_ms": MS} (a one-shot turn) records the repo's
                working tree's git tree as the command starts and once it has ended, and
                writes ``steps.jsonl`` (:mod:`hangar.agent.turntrees`) before ``exit``
    env.json    its variables and secrets (mode 0600); read and removed before it starts
    stdin       what the command reads on its standard input (mode 0600; a turn's message),
                opened and removed before it starts; without it the input is /dev/null

and, written here::

    pid         "SUPERVISOR CHILD": the supervisor (signal it to stop the run) and the command
    log         the command's standard output (the run log)
    stderr      its standard error
    exit        its exit status, written atomically once it has ended and its output is closed;
                130 when the run was stopped (SIGTERM to the supervisor)
    supervisor.log  what went wrong here, if anything
    input       a FIFO (mode 0600: hangar's uid only, the agent can neither write nor forge
                it) of commands to this supervisor, read until the run ends. Each is one
                frame, TYPE (1 byte) + LENGTH (2 bytes, big-endian) + payload, written in one
                write of at most PIPE_BUF bytes (so writers never interleave), applied in order:
                ``d`` input bytes, ``c`` close the input, ``r`` "ROWS COLS" resize, ``s``
                "N" send signal N to the command's process group, ``k`` stop the run as SIGTERM
                does (see :mod:`hangar.agent.attach`, which writes them)

With "stdin": "pipe" the command's standard input is a pipe this process holds open: the
``stdin`` file's bytes go first, then ``d`` frames; the command sees its end only after ``c``.
Without it, ``d`` and ``c`` are ignored and standard input is as described above. With "tty"
the command gets a new session with a pseudo terminal's slave as its controlling terminal and
standard input, output and error (TERM and the initial size from the spec); this process copies
the master's output to ``log`` (mode 0600: hangar's only; ``stderr`` stays empty) and input to
the master; ``r`` sets
the size on the master (the command's foreground group gets SIGWINCH); ``c`` drops later input.
The run ends when the command ends, whatever processes it left behind (their output on a
terminal after that is lost); only a stop kills those.

The command runs as the sandbox's agent, described by ``/hangar/sandbox.json`` (its uid and gid,
its cgroups or rlimits, its HOME and PATH); without that file (a sandbox with no uid split) it
runs as this process's user. The agent can neither signal this process nor write ``exit``.

This process detaches at once: it exits 0 as soon as the command has been started (or 1,
saying why on stderr, if it could not be), while a child of it waits for the command to end.
"""

import ctypes
import errno
import json
import os
import select
import signal
import struct
import sys

IDENTITY = "/hangar/sandbox.json"
HANGAR_BIN = "/hangar/bin"  # first on the command's PATH, whatever its environment says
PR_SET_NO_NEW_PRIVS = 38
TIOCSCTTY = 0x540E
TIOCSWINSZ = 0x5414
HEADER = 3  # a frame's type and length
HELD = 1 << 20  # input bytes held for the command before the FIFO is left to fill up


def read_json(path, remove=False):
    try:
        with open(path) as f:
            value = json.load(f)
    except FileNotFoundError:
        return None
    finally:
        if remove:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
    return value


def write_atomically(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def write_private(path, data):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def write_request(run, request):
    """Make RUN_DIR and write spec.json, env.json and stdin from a ``run RUN_DIR -`` request."""
    import base64

    os.makedirs(run, 0o755, exist_ok=True)
    if os.path.exists(os.path.join(run, "spec.json")) or os.path.exists(os.path.join(run, "pid")):
        raise FileExistsError("run %s exists already" % os.path.basename(run))
    write_private(os.path.join(run, "env.json"), json.dumps(request.get("env") or {}).encode())
    if request.get("stdin") is not None:
        write_private(os.path.join(run, "stdin"), base64.b64decode(request["stdin"]))
    write_private(os.path.join(run, "spec.json"), json.dumps(request["spec"]).encode())


def become_agent(identity):
    """In the child, before exec: join the agent's limits, then become the agent for good."""
    for procs in identity.get("cgroup_procs") or []:
        with open(procs, "w") as f:
            f.write(str(os.getpid()))
    import resource

    limits = identity.get("rlimits") or {}
    if "nproc" in limits:
        resource.setrlimit(resource.RLIMIT_NPROC, (limits["nproc"], limits["nproc"]))
    if "as" in limits:
        resource.setrlimit(resource.RLIMIT_AS, (limits["as"], limits["as"]))
    agent = identity["agent"]
    os.setgroups([])
    os.setresgid(agent["gid"], agent["gid"], agent["gid"])
    os.setresuid(agent["uid"], agent["uid"], agent["uid"])  # every capability goes with it
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(NO_NEW_PRIVS)")


def open_input(run):
    """The run's input file opened for reading and removed (the command keeps the descriptor,
    nobody can read it from the folder after), or /dev/null."""
    path = os.path.join(run, "stdin")
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return os.open(os.devnull, os.O_RDONLY)
    os.unlink(path)
    return fd


def take_input(run):
    """The run's input file's bytes, the file removed (b"" without one)."""
    fd = open_input(run)
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def set_size(fd, rows, cols):
    fcntl_ioctl(fd, TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def fcntl_ioctl(fd, request, arg):
    import fcntl

    return fcntl.ioctl(fd, request, arg)


def start_child(run, spec, env, identity, log, err, stdin, tty=None):
    child = os.fork()
    if child:
        return child
    try:
        if spec.get("tty") is not None or spec.get("stdin") == "pipe":
            for number in (signal.SIGPIPE, signal.SIGTERM):  # as a shell would start it
                signal.signal(number, signal.SIG_DFL)
        if tty is None:
            os.setpgid(0, 0)
        else:
            os.setsid()  # a new session: the terminal below becomes its controlling terminal
            if identity is not None:  # the agent's own terminal (programs reopen it by name)
                agent = identity["agent"]
                try:
                    os.fchown(stdin, agent["uid"], agent["gid"])
                except OSError:
                    pass
        base = {"LANG": "C.UTF-8"}
        if identity is not None:
            if spec.get("as") != "hangar":
                become_agent(identity)
            agent = identity["agent"]
            base.update(HOME=agent["home"], PATH=agent["path"], USER="agent", LOGNAME="agent")
        else:
            base.update(HOME=os.environ.get("HOME", "/root"), PATH=os.environ.get("PATH", ""))
        os.chdir(spec["cwd"])
        os.dup2(stdin, 0)
        os.dup2(log, 1)
        os.dup2(err, 2)
        if tty is not None:
            fcntl_ioctl(0, TIOCSCTTY, 0)
            base["TERM"] = tty.get("term") or "xterm-256color"
        argv = spec["argv"]
        full = dict(base, **env)
        if identity is not None:
            rest = [p for p in full.get("PATH", "").split(":") if p and p != HANGAR_BIN]
            full["PATH"] = ":".join([HANGAR_BIN, *rest])
        os.execvpe(argv[0], argv, full)
    except BaseException as exc:  # the reason goes to the run's stderr; 127 as a shell says
        try:
            os.write(err, ("hangar: cannot start %s: %s\n" % (spec["argv"][0], exc)).encode())
        finally:
            os._exit(127)


def kill_run(child):
    """SIGKILL the command's process group and every process descended from it."""
    doomed = descendants(child)
    for target in [-child, *doomed]:
        try:
            os.kill(target, signal.SIGKILL)
        except OSError:
            pass


def descendants(pid):
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/stat" % entry, "rb") as f:
                    data = f.read()
            except OSError:
                continue
            ppid = int(data[data.rindex(b")") + 2 :].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


class Pump:
    """The supervisor's loop: commands from ``input``, input bytes to the command (a pipe or
    the terminal's master), the master's output to the log, until the command has ended."""

    def __init__(self, control, to_child, master, log, initial, stop):
        self.control, self.to_child, self.master, self.log = control, to_child, master, log
        self.pending = bytearray(initial)
        self.open = to_child is not None
        self.frames = bytearray()
        self.stop = stop
        self.child = 0

    def command(self, kind, payload):
        if kind == b"d" and self.open:
            self.pending += payload
        elif kind == b"c":
            self.open = False
        elif kind == b"r" and self.master is not None:
            rows, cols = (max(1, min(int(n), 1000)) for n in payload.split())
            set_size(self.master, rows, cols)
        elif kind == b"s":
            number = int(payload)
            if 0 < number < signal.NSIG:
                try:
                    os.kill(-self.child, number)
                except OSError:
                    pass
        elif kind == b"k":
            self.stop(signal.SIGTERM, None)

    def read_control(self):
        try:
            self.frames += os.read(self.control, 65536)
        except BlockingIOError:
            return
        while len(self.frames) >= HEADER:
            kind, size = self.frames[:1], struct.unpack(">H", self.frames[1:HEADER])[0]
            if len(self.frames) < HEADER + size:
                break
            payload = bytes(self.frames[HEADER : HEADER + size])
            del self.frames[: HEADER + size]
            try:
                self.command(bytes(kind), payload)
            except (ValueError, OSError) as exc:  # a bad frame is dropped, the run goes on
                sys.stderr.write("dropped a %r frame: %s\n" % (bytes(kind), exc))

    def write_child(self):
        try:
            done = os.write(self.to_child, self.pending[:65536])
        except BlockingIOError:
            return
        except OSError:  # the command closed its input (or the terminal hung up)
            done = len(self.pending)
            self.open = False
        del self.pending[:done]

    def read_master(self):
        """Copy what the master has to the log: True if it had some, None if none now, False
        once it will have no more (EIO: no process has the terminal open)."""
        try:
            data = os.read(self.master, 65536)
        except BlockingIOError:
            return None
        except OSError as exc:
            if exc.errno != errno.EIO:
                raise
            return False
        if not data:
            return False
        os.write(self.log, data)
        return True

    def run(self, child, wake):
        """Pump until ``child`` has ended; returns its wait status."""
        self.child = child
        master = self.master
        while True:
            ended, status = os.waitpid(child, os.WNOHANG)
            if ended:
                break
            if self.to_child is not None and not self.open and not self.pending:
                if self.master is None:
                    os.close(self.to_child)  # the command sees the end of its input
                self.to_child = None
            readers = [wake]
            if len(self.pending) < HELD:
                readers.append(self.control)
            if master is not None:
                readers.append(master)
            writers = [self.to_child] if self.pending and self.to_child is not None else []
            readable, writable, _ = select.select(readers, writers, [])
            if wake in readable:
                try:
                    os.read(wake, 512)
                except BlockingIOError:
                    pass
            if self.control in readable:
                self.read_control()
            if writable:
                self.write_child()
            if master is not None and master in readable and self.read_master() is False:
                master = None
        # What the command wrote just before it ended; a process it left behind may hold the
        # terminal open, so this stops once the master has been quiet for a moment.
        while master is not None and select.select([master], [], [], 0.1)[0]:
            if self.read_master() is False:
                break
        return status


def open_turn_trees(run, options):
    """A one-shot turn's :class:`~hangar.agent.turntrees.TurnTrees` when the spec asks for
    them (the git modules imported only then), else None."""
    if options is None:
        return None
    from hangar.agent.turntrees import TurnTrees, open_trees

    return TurnTrees(open_trees(options, os.path.join(run, "trees")))


def supervise(run, started_w):
    spec = read_json(os.path.join(run, "spec.json"))
    env = read_json(os.path.join(run, "env.json"), remove=True) or {}
    identity = read_json(IDENTITY)
    tty = spec.get("tty")
    piped = tty is not None or spec.get("stdin") == "pipe"
    initial = take_input(run) if piped else b""
    stdin = None if piped else open_input(run)
    # A terminal's output (what a person typed and saw) is hangar's alone; a turn's log is
    # the agent's to read.
    log = os.open(os.path.join(run, "log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                  0o600 if tty is not None else 0o644)  # fmt: skip
    err = os.open(os.path.join(run, "stderr"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    if spec.get("control"):
        for name in ("ctl", "ctl/tmp", "ctl/in"):
            os.mkdir(os.path.join(run, name), 0o700)
    fifo = os.path.join(run, "input")
    os.mkfifo(fifo, 0o600)
    control = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)  # read-write: never an end of file
    master = to_child = None
    if tty is not None:
        master, slave = os.openpty()
        if tty.get("rows") and tty.get("cols"):
            set_size(master, int(tty["rows"]), int(tty["cols"]))
        os.set_blocking(master, False)
        stdin, to_child, out, errors = slave, master, slave, slave
    else:
        out, errors = log, err
        if piped:
            stdin, to_child = os.pipe()
            os.set_blocking(to_child, False)
    # Every file of ours is made before the command runs: a command that uses up the disk's
    # inodes cannot keep its status from being written (the bytes come from hangar's reserve).
    pid_tmp = os.path.join(run, "pid.tmp")
    pid_fd = os.open(pid_tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    exit_tmp = os.path.join(run, "exit.tmp")
    exit_fd = os.open(exit_tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    stopped = []
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)  # a signal (SIGCHLD, SIGTERM) wakes the loop's select
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)

    def stop(signum, frame):
        stopped.append(signum)
        kill_run(child)

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    trees = open_turn_trees(run, spec.get("trees"))
    if trees is not None:
        trees.record("start")
    child = start_child(run, spec, env, identity, out, errors, stdin, tty)
    os.close(stdin)
    if tty is not None:
        os.close(err)  # the log stays open here: the master's output goes to it
    else:
        os.close(log)
        os.close(err)
    os.write(pid_fd, b"%d %d\n" % (os.getpid(), child))
    os.close(pid_fd)
    os.replace(pid_tmp, os.path.join(run, "pid"))
    signal.signal(signal.SIGTERM, stop)
    os.write(started_w, b"ok")
    os.close(started_w)
    pump = Pump(control, to_child, master, log if tty is not None else None, initial, stop)
    status = pump.run(child, wake_r)
    if tty is not None:
        os.close(log)
    # The FIFO stays (nothing reads it now: a writer is told so): removing it would hand the
    # agent back an inode of a disk it may have filled on purpose.
    code = os.waitstatus_to_exitcode(status)
    code = 128 - code if code < 0 else code
    if stopped:
        code = 130
    if trees is not None:
        trees.record("end")
        try:
            trees.write_patches(os.path.join(run, "steps.jsonl"))
        except OSError as exc:
            sys.stderr.write("the steps' patches were not written: %s\n" % exc)
    os.write(exit_fd, b"%d\n" % code)
    os.close(exit_fd)
    os.replace(exit_tmp, os.path.join(run, "exit"))


def main():
    run = sys.argv[1]
    if sys.argv[2:] == ["-"]:
        try:
            write_request(run, json.loads(sys.stdin.buffer.read()))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            sys.exit("cannot start the run: %s" % exc)
    started_r, started_w = os.pipe()
    if os.fork():
        os.close(started_w)
        answer = os.read(started_r, 4096)
        if answer == b"ok":
            sys.exit(0)
        sys.stderr.write(answer.decode(errors="replace") or "the run's supervisor died\n")
        sys.exit(1)
    os.close(started_r)
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    own_log = os.open(os.path.join(run, "supervisor.log"),
                      os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)  # fmt: skip
    os.dup2(null, 0)
    os.dup2(own_log, 1)
    os.dup2(own_log, 2)
    try:
        supervise(run, started_w)
    except BaseException as exc:
        message = "cannot supervise the run: %s\n" % exc
        try:
            os.write(started_w, message.encode())
        except OSError:  # already answered: the command started, then something failed
            sys.stderr.write(message)
            write_atomically(os.path.join(run, "exit"), "1\n")
    os._exit(0)


if __name__ == "__main__":
    main()
