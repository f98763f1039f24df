"""Restore has the sandbox to itself: an agent process the environment's setup left running,
swapping folders for links to hangar's own folder in a tight loop, is ended before every restore
(open after suspend, and a fork's), and hangar's folder comes out untouched while the work comes
back whole."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from hangar.models import SessionState, StartStep, TurnOutcome
from hangar.sandboxes import SandboxUser
from hangar.sessions.environments import EnvironmentChange
from tests.unit.sessions.world import World

pytestmark = pytest.mark.sandbox

IDENTITY = {"GIT_AUTHOR_NAME": "A", "GIT_AUTHOR_EMAIL": "a@x", "GIT_COMMITTER_NAME": "A",
            "GIT_COMMITTER_EMAIL": "a@x"}  # fmt: skip
AGENT_UID = 1000
CONVERSATIONS = "/root/.gemini/antigravity-cli/conversations"

# The racer swaps a tracked folder of the repo with a link to /hangar, and the conversation
# folder with a link to /hangar/runs (whose exit files hangar trusts), forking every few hundred
# rounds so that its pid keeps changing. It holds a lock that every fork shares: the lock is
# free again only once no process of it is left.
RACER = r"""
import ctypes, fcntl, os
libc = ctypes.CDLL(None, use_errno=True)
PAIRS = [("/workspace/app/src", "/hangar"), ("%s", "/hangar/runs")]
for folder, target in PAIRS:
    os.makedirs(folder, exist_ok=True)
    if not os.path.islink(folder + ".swap"):
        os.symlink(target, folder + ".swap")
lock = os.open("/tmp/racer.lock", os.O_RDONLY | os.O_CREAT, 0o644)
fcntl.flock(lock, fcntl.LOCK_EX)
open("/tmp/racing", "w").close()
rounds = 0
while True:
    for folder, _ in PAIRS:
        libc.renameat2(-100, folder.encode(), -100, (folder + ".swap").encode(), 2)
    rounds += 1
    if rounds %% 300 == 0 and os.fork():
        os._exit(0)
""" % CONVERSATIONS

RACY_SETUP = f"""cat > /tmp/racer.py <<'EOF'
{RACER}
EOF
nohup python3 /tmp/racer.py >/dev/null 2>&1 &
while [ ! -e /tmp/go ]; do sleep 0.02; done
"""

# hangar's folder as hangar sees it: each entry's owner, mode and content (or link target).
# Its scratch space is left out (each restore stages there), and the harness folder (read-only).
SNAPSHOT = r"""
import hashlib, json, os, stat
out = {}
for dirpath, dirnames, filenames in os.walk("/hangar"):
    if dirpath in ("/hangar/tmp", "/hangar/harnesses"):
        dirnames[:] = []
        continue
    for name in dirnames + filenames:
        path = os.path.join(dirpath, name)
        st = os.lstat(path)
        if stat.S_ISREG(st.st_mode):
            with open(path, "rb") as f:
                body = hashlib.sha256(f.read()).hexdigest()
        elif stat.S_ISLNK(st.st_mode):
            body = os.readlink(path)
        else:
            body = None
        out[path] = [st.st_uid, stat.S_IMODE(st.st_mode), body]
print(json.dumps(out))
"""

LOCK_FREE = "import fcntl, os; fcntl.flock(os.open('/tmp/racer.lock', os.O_RDONLY), " \
    "fcntl.LOCK_EX | fcntl.LOCK_NB)"  # fmt: skip


def as_hangar(world: World, sandbox: str, argv: list[str]) -> tuple[int, str]:
    result = world.sandboxes.exec(sandbox, argv, user=SandboxUser.HANGAR)
    return result.exit_code, result.stdout.decode()


def hangar_folder(world: World, sandbox: str) -> dict[str, list[object]]:
    code, out = as_hangar(world, sandbox, ["python3", "-I", "-S", "-c", SNAPSHOT])
    assert code == 0
    snapshot: dict[str, list[object]] = json.loads(out)
    return snapshot


def restore_while_racing(world: World, ref: str) -> str:
    """Carry the start of ``ref`` through its setup, which leaves the racer running, and its
    restore; check what the racer could reach. Returns the sandbox."""
    deadline = time.monotonic() + 60
    while True:
        session = world.service.resolve(ref)
        assert session.state is SessionState.STARTING, session.start_error
        if session.phase and session.phase.step is StartStep.RUNNING_SETUP and session.sandbox_id:
            if as_hangar(world, session.sandbox_id, ["test", "-e", "/tmp/racing"])[0] == 0:
                break
        assert time.monotonic() < deadline, f"the racer never started: {session.phase}"
        time.sleep(0.02)
    sandbox = session.sandbox_id
    assert session.start is not None and session.start.run
    setup_run = f"/hangar/runs/{session.start.run}/"
    before = hangar_folder(world, sandbox)
    assert as_hangar(world, sandbox, ["python3", "-c", LOCK_FREE])[0] != 0  # it races

    assert as_hangar(world, sandbox, ["touch", "/tmp/go"])[0] == 0  # the setup ends
    after_start = world.settle(ref)

    assert after_start.state is SessionState.IDLE, after_start.start_error
    assert after_start.restored_from is not None and not after_start.restore_skipped
    assert as_hangar(world, sandbox, ["python3", "-c", LOCK_FREE])[0] == 0  # no racer is left
    after = hangar_folder(world, sandbox)
    for path, (owner, mode, body) in before.items():
        if path.startswith(setup_run):  # the setup's own run, writing its end meanwhile
            continue
        assert path in after, f"{path} went"
        if path.startswith("/hangar/limits/"):  # the agent's cgroups: their pids come and go
            assert after[path][:2] == [owner, mode], path
        else:
            assert after[path] == [owner, mode, body], path
    assert [path for path, entry in after.items() if entry[0] == AGENT_UID] == []
    return sandbox


def test_a_racer_left_by_the_setup_is_ended_before_each_restore_and_hangars_folder_is_untouched(
    world: World, remote: Path
) -> None:
    world.service.environments.add("racy", str(remote), vars=IDENTITY)
    world.service.new("race", "run: echo one > committed.txt && git add committed.txt && "
                      "git commit -qm 'first change' && echo 'uncommitted line' >> README.md && "
                      "mkdir -p deep/er && echo note > deep/er/notes.txt", "racy",
                      harness="antigravity")  # fmt: skip
    assert world.service.wait("race", timeout=60, poll=0.05).outcome is TurnOutcome.EXITED
    work = world.sh("race", f"git log -1 --format=%s; tail -1 README.md; cat deep/er/notes.txt; "
                    f"cat src/main.py; ls {CONVERSATIONS} | wc -l")  # fmt: skip
    assert work == "first change\nuncommitted line\nnote\nprint(1)\n1\n"
    world.service.suspend("race")
    # From now on every new sandbox of the environment starts the racer in its setup.
    world.service.environments.update("racy", EnvironmentChange(setup=RACY_SETUP))

    world.service.open("race")
    restore_while_racing(world, "race")
    assert world.sh("race", f"git log -1 --format=%s; tail -1 README.md; cat deep/er/notes.txt; "
                    f"cat src/main.py; ls {CONVERSATIONS} | wc -l") == work  # fmt: skip
    assert world.sh("race", f"find /workspace/app {CONVERSATIONS} ! -user agent") == ""

    [fork] = world.service.fork("race", 1)
    restore_while_racing(world, fork.name)
    assert world.sh(fork.name, f"git log -1 --format=%s; tail -1 README.md; "
                    f"cat deep/er/notes.txt; cat src/main.py; ls {CONVERSATIONS} | wc -l") == work
