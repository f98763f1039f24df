"""Supervise one detached run inside a sandbox. Standard library only; run as hangar's user
(uid 0 of the sandbox) as ``python3 -I -S -c SRC RUN_DIR``.

RUN_DIR (hangar's, out of the agent's reach) holds, written by the control plane::

    spec.json   {"argv": [...], "cwd": "..."}: the command and where it runs
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

The command runs as the sandbox's agent, described by ``/hangar/sandbox.json`` (its uid and gid,
its cgroups or rlimits, its HOME and PATH); without that file (a sandbox with no uid split) it
runs as this process's user. The agent can neither signal this process nor write ``exit``.

This process detaches at once: it exits 0 as soon as the command has been started (or 1,
saying why on stderr, if it could not be), while a child of it waits for the command to end.
"""

import ctypes
import json
import os
import signal
import sys

IDENTITY = "/hangar/sandbox.json"
HANGAR_BIN = "/hangar/bin"  # first on the command's PATH, whatever its environment says
PR_SET_NO_NEW_PRIVS = 38


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


def start_child(run, spec, env, identity, log, err, stdin):
    child = os.fork()
    if child:
        return child
    try:
        os.setpgid(0, 0)
        base = {"LANG": "C.UTF-8"}
        if identity is not None:
            become_agent(identity)
            agent = identity["agent"]
            base.update(HOME=agent["home"], PATH=agent["path"], USER="agent", LOGNAME="agent")
        else:
            base.update(HOME=os.environ.get("HOME", "/root"), PATH=os.environ.get("PATH", ""))
        os.chdir(spec["cwd"])
        os.dup2(stdin, 0)
        os.dup2(log, 1)
        os.dup2(err, 2)
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


def supervise(run, started_w):
    spec = read_json(os.path.join(run, "spec.json"))
    env = read_json(os.path.join(run, "env.json"), remove=True) or {}
    identity = read_json(IDENTITY)
    stdin = open_input(run)
    log = os.open(os.path.join(run, "log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    err = os.open(os.path.join(run, "stderr"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    # Every file of ours is made before the command runs: a command that uses up the disk's
    # inodes cannot keep its status from being written (the bytes come from hangar's reserve).
    pid_tmp = os.path.join(run, "pid.tmp")
    pid_fd = os.open(pid_tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    exit_tmp = os.path.join(run, "exit.tmp")
    exit_fd = os.open(exit_tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    stopped = []

    def stop(signum, frame):
        stopped.append(signum)
        kill_run(child)

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = start_child(run, spec, env, identity, log, err, stdin)
    os.close(stdin)
    os.close(log)
    os.close(err)
    os.write(pid_fd, b"%d %d\n" % (os.getpid(), child))
    os.close(pid_fd)
    os.replace(pid_tmp, os.path.join(run, "pid"))
    signal.signal(signal.SIGTERM, stop)
    os.write(started_w, b"ok")
    os.close(started_w)
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
    code = os.waitstatus_to_exitcode(status)
    code = 128 - code if code < 0 else code
    if stopped:
        code = 130
    os.write(exit_fd, b"%d\n" % code)
    os.close(exit_fd)
    os.replace(exit_tmp, os.path.join(run, "exit"))


def main():
    run = sys.argv[1]
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
