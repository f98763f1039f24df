"""hangar/agent/fdtree.py and quiesce.py, on the host as root (the position of hangar's tools in
a sandbox): the clean and the hand-over never follow a folder another process swaps for a link,
and ending the agent's processes ends every one of them, a forking one too, and nothing else.

The races are real: a separate process swaps a folder and a link to a ``victim`` folder with
renameat2(RENAME_EXCHANGE) in a tight loop while the walk runs. ``git clean -fd`` itself loses
this race (it removes files of the victim now and then): its walk goes by path names."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from hangar.agent import fdtree
from tests.conftest import git

PROJECT = Path(__file__).resolve().parents[3]
OTHER_UID = 3_999_001  # a uid no one on this machine uses: the stand-in for the agent
BYSTANDER_UID = 3_999_003

RACER = r"""
import ctypes, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
folder, link, target, started, count = sys.argv[1:6]
swaps = 0
def done(*_):
    with open(count, "w") as f:
        f.write(str(swaps))
    os._exit(0)
signal.signal(signal.SIGTERM, done)
open(started, "w").close()
while True:
    if libc.renameat2(-100, folder.encode(), -100, link.encode(), 2) == 0:
        swaps += 1
    else:  # the link (or the folder) was removed: put a link back
        try:
            os.symlink(target, link)
        except OSError:
            pass
"""


@contextmanager
def racing(folder: Path, target: Path) -> Iterator[list[int]]:
    """Swap ``folder`` and a link to ``target`` until the block ends; the list yielded holds
    the number of swaps afterwards."""
    link = folder.with_name(folder.name + ".link")
    link.symlink_to(target)
    flags = folder.parent.parent / "racer"
    flags.mkdir(exist_ok=True)
    started, count = flags / "started", flags / "count"
    started.unlink(missing_ok=True)
    proc = subprocess.Popen([sys.executable, "-c", RACER, str(folder), str(link), str(target),
                             str(started), str(count)])  # fmt: skip
    swaps: list[int] = []
    try:
        deadline = time.monotonic() + 10
        while not started.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the racer never began"
            time.sleep(0.001)
        yield swaps
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
        swaps.append(int(count.read_text()))


def tree(top: Path) -> dict[str, tuple[object, ...]]:
    """Every path beneath ``top`` with its kind, owner and content or link target."""
    out: dict[str, tuple[object, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(os.fsencode(top)):
        for name in [*dirnames, *filenames]:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            body: object = None
            if stat.S_ISLNK(st.st_mode):
                body = os.readlink(path)
            elif stat.S_ISREG(st.st_mode):
                body = Path(os.fsdecode(path)).read_bytes()
            out[os.fsdecode(os.path.relpath(path, os.fsencode(top)))] = (
                stat.S_IFMT(st.st_mode), st.st_uid, st.st_gid, body)
    return out


def victim_in(root: Path, files: int = 50) -> Path:
    victim = root / "victim"
    (victim / "sub").mkdir(parents=True)
    for i in range(files):
        (victim / f"f{i:03d}").write_text("the victim's\n")
    (victim / "sub" / "keep").write_text("the victim's\n")
    return victim


def clean(repo: Path) -> None:
    """What restore does for ``git clean -fd``: git lists, fdtree removes."""
    def listing(*extra: str) -> list[bytes]:
        return subprocess.run(["git", "-C", str(repo), "ls-files", "-z", "--others",
                               "--exclude-standard", *extra], capture_output=True,
                              check=True).stdout.split(b"\0")  # fmt: skip
    fdtree.remove_untracked(str(repo), listing(), listing("--directory"))


# The clean ------------------------------------------------------------------------------------


def test_removing_untracked_files_leaves_exactly_what_git_clean_leaves(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    git(tmp_path, "init", "-q", str(repo))
    (repo / ".gitignore").write_text("*.log\n")
    (repo / "t").mkdir()
    (repo / "t" / "a").write_text("tracked\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "seed")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x").write_text("outside\n")
    for path, text in [("u/x", "1"), ("u/v/keep.log", "2"), ("u/v/w/y", "3"), ("t/new", "4"),
                       ("t/n.log", "5"), ("onlyign/i.log", "6"), ("nested/z", "7")]:  # fmt: skip
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    git(repo / "nested", "init", "-q")
    (repo / "empty" / "deeper").mkdir(parents=True)
    (repo / "u" / "linkdir").symlink_to(outside)
    (repo / "topl").symlink_to(outside)
    for name in (b"caf\xe9.txt", b"u/caf\xe9/x"):  # names that are not UTF-8
        path = os.path.join(os.fsencode(repo), name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        Path(os.fsdecode(path)).write_text("latin-1\n")
    twin = tmp_path / "twin"
    shutil.copytree(repo, twin, symlinks=True)

    clean(repo)
    git(twin, "clean", "-fdq")

    assert tree(repo) == tree(twin)
    assert "u/v/keep.log" in tree(repo) and "nested/z" in tree(repo)
    assert "u/x" not in tree(repo) and "empty" not in tree(repo)
    assert (outside / "x").read_text() == "outside\n"


def test_a_folder_swapped_for_a_link_during_the_clean_never_lets_a_removal_out(
    tmp_path: Path,
) -> None:
    victim = victim_in(tmp_path)
    before = tree(victim)
    repo = tmp_path / "repo"
    git(tmp_path, "init", "-q", str(repo))
    total = 0
    for attempt in range(4):
        (repo / "u" / "sub").mkdir(parents=True)
        for i in range(300):
            (repo / "u" / f"f{i:03d}").write_text("untracked\n")
        (repo / "u" / "sub" / "keep").write_text("untracked\n")
        with racing(repo / "u", victim) as swaps:
            clean(repo)
        total += swaps[0]
        assert tree(victim) == before, f"attempt {attempt}"
        for leftover in (repo / "u", repo / "u.link"):  # whichever is the link now
            if leftover.is_symlink():
                leftover.unlink()
            elif leftover.exists():
                shutil.rmtree(leftover)
    assert total > 0


# The hand-over --------------------------------------------------------------------------------


def test_the_hand_over_reaches_everything_beneath_and_changes_links_never_their_targets(
    tmp_path: Path,
) -> None:
    victim = victim_in(tmp_path, files=3)
    before = tree(victim)
    home = tmp_path / "home"
    top = home / ".claude" / "projects"
    (top / "deep" / "er").mkdir(parents=True)
    (top / "deep" / "er" / "conv.jsonl").write_text("{}\n")
    (top / "out").symlink_to(victim)
    (top / "deep" / "victim-file").symlink_to(victim / "f000")
    os.link(victim / "f001", top / "hard")  # a name of a file that lies outside too
    (home / "beside").mkdir()

    fdtree.hand_over(str(home), [".claude", "projects"], OTHER_UID, OTHER_UID, parents=True)

    owned = tree(home)
    assert owned.pop("beside")[1:3] == (0, 0)  # not on the way: left as it was
    assert owned.pop(".claude/projects/hard")[1:3] == (0, 0)
    assert {path: entry[1:3] for path, entry in owned.items()} == {
        path: (OTHER_UID, OTHER_UID) for path in owned
    }
    assert os.stat(home).st_uid == 0
    assert tree(victim) == before


def test_a_folder_swapped_for_a_link_during_the_hand_over_never_changes_an_owner_outside(
    tmp_path: Path,
) -> None:
    victim = victim_in(tmp_path)
    before = tree(victim)
    repo = tmp_path / "workspace" / "app"
    (repo / "src" / "sub").mkdir(parents=True)
    for i in range(300):
        (repo / "src" / f"f{i:03d}").write_text("restored\n")
    (repo / "src" / "sub" / "keep").write_text("restored\n")
    with racing(repo / "src", victim) as swaps:
        for _ in range(6):
            fdtree.hand_over(str(repo.parent), ["app"], OTHER_UID, OTHER_UID)
    assert swaps[0] > 0
    assert tree(victim) == before


def test_a_link_on_the_way_to_a_folder_is_removed_and_what_it_points_to_is_kept(
    tmp_path: Path,
) -> None:
    victim = victim_in(tmp_path, files=2)
    before = tree(victim)
    home = tmp_path / "home"
    (home / ".gemini" / "cli").mkdir(parents=True)
    (home / ".gemini" / "cli" / "conversations").symlink_to(victim)
    parts = [".gemini", "cli", "conversations", "inner"]

    assert fdtree.remove_link_on_path(str(home), parts) == ".gemini/cli/conversations"
    assert fdtree.remove_link_on_path(str(home), parts) is None
    assert not (home / ".gemini" / "cli" / "conversations").exists()
    assert tree(victim) == before


# Ending the agent's processes -----------------------------------------------------------------

FORKER = r"""
import fcntl, os, sys, time
lock = int(sys.argv[1])
fcntl.flock(lock, fcntl.LOCK_EX)  # held while any process of the chain lives: forks share it
while True:
    time.sleep(0.002)
    if os.fork():
        os._exit(0)  # the child goes on under a new pid
"""


def held(lock: Path) -> bool:
    import fcntl

    fd = os.open(lock, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def until(condition: Callable[[], bool], what: str, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


def end_agent_processes_as_the_restore(identity: Path) -> subprocess.CompletedProcess[str]:
    """quiesce.end_agent_processes in a process of its own, as the restore script runs it."""
    return subprocess.run(
        [sys.executable, "-I", "-S", "-c", "import sys; sys.path.insert(0, 'shared'); "
         "from hangar.agent import quiesce; "
         f"quiesce.end_agent_processes(identity={str(identity)!r})"],
        capture_output=True, text=True, cwd=PROJECT, timeout=60,
    )  # fmt: skip


def test_every_process_of_the_agent_is_ended_a_forking_one_too_and_no_other(
    tmp_path: Path,
) -> None:
    from hangar.agent import quiesce

    identity = tmp_path / "sandbox.json"
    identity.write_text('{"agent": {"uid": %d, "gid": %d}}' % (OTHER_UID, OTHER_UID))
    lock = tmp_path / "chain.lock"
    lock.write_text("")
    as_agent = {"user": OTHER_UID, "group": OTHER_UID, "extra_groups": [], "cwd": "/"}
    given = os.open(lock, os.O_RDONLY)  # the chain's only way to the lock: it inherits it
    try:
        forker = subprocess.Popen(["/usr/bin/python3", "-I", "-S", "-c", FORKER, str(given)],
                                  pass_fds=[given], **as_agent)  # type: ignore[call-overload]
    finally:
        os.close(given)
    sleeper = subprocess.Popen(["sleep", "600"], **as_agent)  # type: ignore[call-overload]
    bystander = subprocess.Popen(["sleep", "600"], user=BYSTANDER_UID, group=BYSTANDER_UID,
                                 extra_groups=[])  # fmt: skip
    try:
        until(lambda: held(lock), "the forking process never started")
        forker.wait(timeout=10)  # its first process is gone already: the chain lives on
        assert held(lock)

        ending = end_agent_processes_as_the_restore(identity)

        assert ending.returncode == 0, ending.stderr
        until(lambda: not held(lock), "a process of the forking chain lives on")
        assert sleeper.wait(timeout=10) == -signal.SIGKILL
        assert bystander.poll() is None  # another user's process lives on
        assert quiesce.processes_of(OTHER_UID) == []
        # No agent named (a sandbox without the uid split): nothing is done.
        assert quiesce.end_agent_processes(identity=str(tmp_path / "missing.json")) is None
    finally:
        for proc in (forker, sleeper, bystander):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for pid in quiesce.processes_of(OTHER_UID):
            os.kill(pid, signal.SIGKILL)


STOPPER = """
import os, signal
while True:
    try:
        os.kill(-1, signal.SIGSTOP)  # every process it may signal: the killer, once it is ours
    except OSError:
        pass
"""


def test_a_process_that_stops_everything_it_may_signal_is_ended_all_the_same(
    tmp_path: Path,
) -> None:
    from hangar.agent import quiesce

    identity = tmp_path / "sandbox.json"
    identity.write_text('{"agent": {"uid": %d, "gid": %d}}' % (OTHER_UID, OTHER_UID))
    as_agent = {"user": OTHER_UID, "group": OTHER_UID, "extra_groups": [], "cwd": "/"}
    stopper = subprocess.Popen(["/usr/bin/python3", "-I", "-S", "-c", STOPPER],
                               **as_agent)  # type: ignore[call-overload]
    try:
        until(lambda: quiesce.processes_of(OTHER_UID) != [], "the stopper never started")
        ending = end_agent_processes_as_the_restore(identity)
        assert ending.returncode == 0, ending.stderr
        assert stopper.wait(timeout=10) == -signal.SIGKILL
        assert quiesce.processes_of(OTHER_UID) == []
    finally:
        if stopper.poll() is None:
            stopper.kill()
            stopper.wait()
