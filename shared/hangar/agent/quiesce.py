"""End every process of the sandbox's agent, so that a restore has the sandbox to itself.
Standard library only: shipped into sandboxes with the scripts that import it.

A restore writes the agent's repo and HOME as hangar's user (uid 0 inside, with capabilities
over the agent's files). An agent process still running then (one the environment's setup left
behind, started from the repo's code) could swap a folder for a link to hangar's own folder
while the restore walks it. :func:`end_agent_processes` is called before anything is touched:

- who the agent is comes from ``/hangar/sandbox.json`` (hangar's, out of the agent's reach);
  without it (a sandbox with no uid split) or when the agent is this process's own user, there
  is no process to tell apart from ours and nothing is done;
- a child of this process becomes the agent (uid and gid, no groups; every capability goes with
  the uid) and sends SIGKILL to every process it may signal (``kill(-1)``): exactly the agent's,
  never hangar's (the agent may not signal them, and neither may a process that has become the
  agent). The kernel makes a fork that races the signal fail, or signals its child too;
- ``/proc`` is then read until no process of the agent's is left (zombies, already dead,
  aside), signalling again while any is, for at most ``timeout`` seconds.

Nothing else starts agent processes in a sandbox during a restore (turns start after it), so
the sandbox stays the restore's until it ends.
"""

import json
import os
import signal
import time

IDENTITY = "/hangar/sandbox.json"


class StillRunning(Exception):
    """Processes of the agent's outlived the deadline: ``pids`` lists them."""

    def __init__(self, pids, seconds):
        shown = ", ".join(map(str, sorted(pids)[:20]))
        super().__init__("%d process(es) of the agent's still run after %g s (pids %s)"
                         % (len(pids), seconds, shown))  # fmt: skip
        self.pids = pids


def agent_identity(path=IDENTITY):
    """(uid, gid) of the sandbox's agent, or None when the sandbox names none."""
    try:
        with open(path) as f:
            agent = json.load(f)["agent"]
        return int(agent["uid"]), int(agent["gid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def processes_of(uid):
    """The pids of the live processes whose real uid is ``uid`` (zombies left out)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/status" % entry, "rb") as f:
                status = f.read()
        except OSError:
            continue  # gone meanwhile
        fields = {}
        for line in status.splitlines():
            key, _, value = line.partition(b":")
            fields[key] = value.split()
        try:
            real_uid = int(fields[b"Uid"][0])
            state = fields[b"State"][0]
        except (KeyError, IndexError, ValueError):
            continue
        if real_uid == uid and state not in (b"Z", b"X"):
            found.append(int(entry))
    return found


def kill_all_as(uid, gid, wait=1.0):
    """SIGKILL every process ``uid`` may signal, from a child that has become ``uid``.

    For that moment the child is the agent's, so a process of the agent's may stop it
    (``kill(-1, SIGSTOP)`` in a loop): a child that is stopped, or not done within ``wait``
    seconds, is killed by this process (which the agent may not signal), and the caller's
    next round kills the agent's processes by pid."""
    child = os.fork()
    if child == 0:
        try:
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
            os.kill(-1, signal.SIGKILL)  # all it may signal but itself
            os._exit(0)
        except BaseException:
            os._exit(1)
    limit = time.monotonic() + wait
    while True:
        pid, status = os.waitpid(child, os.WNOHANG | os.WUNTRACED)
        if pid == child and not os.WIFSTOPPED(status):
            if os.waitstatus_to_exitcode(status) != 0:
                raise OSError("could not signal the agent's processes as the agent")
            return
        if pid == child or time.monotonic() > limit:
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
            return
        time.sleep(0.001)


def kill_by_pid(pids):
    """SIGKILL each of ``pids`` from here (hangar's user may signal the agent's processes)."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def end_agent_processes(timeout=10.0, identity=IDENTITY):
    """End every process of the agent's. Raises StillRunning when some outlive ``timeout``
    seconds (a process stuck in the kernel), OSError when the agent cannot be signalled.
    Nothing is done in a sandbox without a distinct agent.

    The signal goes first, whatever ``/proc`` shows: a process that forks and exits in a loop
    can be missed by a reading of ``/proc`` (its pid changes while the folder is read), never by
    ``kill(-1)``. The readings after it only wait for the killed to be gone."""
    who = agent_identity(identity)
    if who is None or who[0] == os.getuid():
        return
    uid, gid = who
    deadline = time.monotonic() + timeout
    while True:
        kill_all_as(uid, gid)
        # A killed process leaves /proc (or becomes a zombie) at once unless it is busy in the
        # kernel: look again shortly, and signal again if anything is left.
        for _ in range(20):
            alive = processes_of(uid)
            if not alive:
                return
            time.sleep(0.005)
        kill_by_pid(alive)  # a process that stopped the killing child, say
        if time.monotonic() > deadline:
            raise StillRunning(alive, timeout)
