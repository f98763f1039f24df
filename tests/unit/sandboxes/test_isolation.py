"""A local sandbox as a boundary: each attack a hostile agent would try, run from inside a real
sandbox the way the agent would run it, and each refused by the kernel's own rules."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hangar.blobs.local import LocalBlobs
from hangar.config import Settings
from hangar.db.sqlite import SqliteDb
from hangar.processes.runs import read_run, start_run, wait_run
from hangar.keys.local import LocalKeys
from hangar.sandboxes import SandboxSpec, SandboxUser
from hangar.sandboxes.local.isolation import INNER_AGENT, LimitsMode, uids_for
from hangar.sandboxes.local import LocalSandboxes
from hangar.testing.sandboxes import Listener, connect, run
from tests.rig import make_engine

pytestmark = pytest.mark.sandbox

AGENT, HANGAR = SandboxUser.AGENT, SandboxUser.HANGAR


def record(sandboxes: LocalSandboxes, sandbox_id: str) -> dict[str, object]:
    value = json.loads((sandboxes.root / sandbox_id / "record.json").read_text())
    assert isinstance(value, dict)
    return value


def host_uids_of(sandboxes: LocalSandboxes, sandbox_id: str) -> tuple[int, int]:
    rec = record(sandboxes, sandbox_id)
    hangar, agent = rec["hangar_uid"], rec["agent_uid"]
    assert isinstance(hangar, int) and isinstance(agent, int)
    return hangar, agent


def host_pids_with(marker: str) -> list[int]:
    """Host pids whose command line holds ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                continue
    return found


def status_uid(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError(f"no Uid line for {pid}")


def until(predicate: Callable[[], object], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.fixture
def listeners() -> Iterator[list[Listener]]:
    made: list[Listener] = []
    yield made
    for listener in made:
        listener.close()


# -- users --------------------------------------------------------------------------------------


@pytest.mark.parametrize("user", list(SandboxUser))
def test_writing_a_host_sysctl_or_reading_the_shadow_file_is_refused(
    sandboxes: LocalSandboxes, user: SandboxUser
) -> None:
    before = Path("/proc/sys/kernel/core_uses_pid").read_text()
    info = sandboxes.create(SandboxSpec())
    flipped = "1" if before.strip() == "0" else "0"
    write = sandboxes.exec(info.id, ["sh", "-c", f"echo {flipped} > /proc/sys/kernel/core_uses_pid"],
                           user=user)  # fmt: skip
    assert not write.ok
    assert Path("/proc/sys/kernel/core_uses_pid").read_text() == before
    pattern = sandboxes.exec(info.id, ["sh", "-c", "echo '|/tmp/x' > /proc/sys/kernel/core_pattern"],
                             user=user)  # fmt: skip
    assert not pattern.ok
    shadow = sandboxes.exec(info.id, ["cat", "/etc/shadow"], user=user)
    assert not shadow.ok and b"Permission denied" in shadow.stderr


def test_the_hosts_process_list_shows_the_sandbox_under_its_two_unprivileged_uids(
    sandboxes: LocalSandboxes,
) -> None:
    info = sandboxes.create(SandboxSpec())
    hangar, agent = host_uids_of(sandboxes, info.id)
    assert (hangar, agent) == uids_for(sandboxes.uid_base, (hangar - sandboxes.uid_base) // 2)
    for user, marker in ((AGENT, "301.5"), (HANGAR, "302.5")):
        sandboxes.exec(info.id, ["sh", "-c", f"sleep {marker} </dev/null >/dev/null 2>&1 &"],
                       user=user)  # fmt: skip
    until(lambda: host_pids_with("301.5") and host_pids_with("302.5"))
    assert {status_uid(p) for p in host_pids_with("301.5")} == {agent}
    assert {status_uid(p) for p in host_pids_with("302.5")} == {hangar}
    assert min(hangar, agent) >= sandboxes.uid_base
    inside = run(sandboxes, info.id, "id -u; id -un; cat /proc/self/uid_map")
    assert inside.split()[:2] == [str(INNER_AGENT), "agent"]
    assert inside.split()[2:] == ["0", str(hangar), "1", str(INNER_AGENT), str(agent), "1"]


def test_two_data_folders_at_once_get_four_distinct_uids(tmp_path: Path) -> None:
    one = LocalSandboxes(tmp_path / "one" / "sandboxes")
    two = LocalSandboxes(tmp_path / "two" / "sandboxes")
    try:
        a, b = one.create(SandboxSpec()), two.create(SandboxSpec())
        uids = {*host_uids_of(one, a.id), *host_uids_of(two, b.id)}
        assert len(uids) == 4
        index = {(u - one.uid_base) // 2 for u in uids}
        assert len(index) == 2  # each sandbox holds one index, both uids of it
    finally:
        for backend in (one, two):
            for info in backend.list():
                backend.destroy(info.id)


def test_a_destroyed_sandbox_frees_its_uids_for_the_next(tmp_path: Path) -> None:
    sandboxes = LocalSandboxes(tmp_path / "sandboxes")
    first = sandboxes.create(SandboxSpec())
    uids = host_uids_of(sandboxes, first.id)
    sandboxes.destroy(first.id)
    second = sandboxes.create(SandboxSpec())
    try:
        # The lowest free pair: the freed one, unless another test holds a lower one meanwhile.
        assert host_uids_of(sandboxes, second.id)[0] <= uids[0]
    finally:
        sandboxes.destroy(second.id)


def test_the_agent_can_neither_replace_nor_forge_a_runs_files(sandboxes: LocalSandboxes) -> None:
    info = sandboxes.create(SandboxSpec())
    start_run(sandboxes, info.id, "victim", ["sh", "-c", "echo working; sleep 0.5; exit 3"],
              cwd="/tmp", env={"TOKEN": "t0k"})  # fmt: skip
    forgeries = [
        "echo 0 > /hangar/runs/victim/exit",
        "rm -f /hangar/runs/victim/spec.json",
        "mv /hangar/runs/victim /hangar/runs/moved",
        "echo '{}' > /hangar/runs/victim/spec.json",
        "mkdir /hangar/runs/forged",
        "ls /hangar/runs",
        "cat /hangar/runs/victim/supervisor.log",
        "touch /hangar/tmp/lock",
        "ls /hangar",
    ]
    for script in forgeries:
        result = sandboxes.exec(info.id, ["sh", "-c", script])
        assert not result.ok, (script, result)
    log, code = wait_run(sandboxes, info.id, "victim", timeout=30, poll=0.05)
    assert (log, code) == (b"working\n", 3)
    # The agent reads what it must (its own output), and nothing of hangar's moves.
    assert run(sandboxes, info.id, "cat /hangar/runs/victim/log") == "working\n"
    assert read_run(sandboxes, info.id, "victim").exit_code == 3


def test_the_environment_never_appears_on_the_hosts_process_list(sandboxes: LocalSandboxes) -> None:
    info = sandboxes.create(SandboxSpec(env={"BASE_SECRET": "base-7f31"}))
    sandboxes.exec(info.id, ["sh", "-c", 'sleep 304.5 </dev/null >/dev/null 2>&1 & echo "$CALL"'],
                   env={"CALL_SECRET": "call-9e27"})  # fmt: skip
    until(lambda: host_pids_with("304.5"))
    assert host_pids_with("base-7f31") == [] and host_pids_with("call-9e27") == []


# -- network ------------------------------------------------------------------------------------


def test_the_host_seen_through_slirps_addresses_is_unreachable_but_an_allowed_port(
    sandboxes: LocalSandboxes, listeners: list[Listener]
) -> None:
    # The loopback itself, allowed port and all, is the conformance suite's (host_ports).
    allowed, server = Listener(b"model stub"), Listener(b"hangar serve")
    listeners += [allowed, server]
    info = sandboxes.create(SandboxSpec(host_ports=[allowed.port]))
    assert connect(sandboxes, info.id, "127.0.0.1", allowed.port) == "got model stub"
    for host in ("10.0.2.2", "10.0.2.3"):  # the host itself, seen from inside
        assert connect(sandboxes, info.id, host, server.port).startswith("refused"), host


def test_an_allowed_port_stays_reachable_after_the_process_that_made_the_sandbox_exits(
    sandboxes: LocalSandboxes, listeners: list[Listener]
) -> None:
    allowed = Listener(b"still here")
    listeners.append(allowed)
    script = (
        "import sys; from pathlib import Path; from hangar.sandboxes import SandboxSpec; "
        "from hangar.sandboxes.local import LocalSandboxes; "
        "print(LocalSandboxes(Path(sys.argv[1])).create(SandboxSpec(host_ports=[int(sys.argv[2])])).id)"
    )
    made = subprocess.run([sys.executable, "-c", script, str(sandboxes.root), str(allowed.port)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert connect(sandboxes, made.stdout.strip(), "127.0.0.1", allowed.port) == "got still here"


def test_listening_inside_on_the_servers_port_leaves_the_host_its_port(
    sandboxes: LocalSandboxes, listeners: list[Listener]
) -> None:
    server = Listener(b"the real server")
    listeners.append(server)
    info = sandboxes.create(SandboxSpec())
    squat = (
        "import socket, sys, time; s = socket.create_server(('127.0.0.1', int(sys.argv[1]))); "
        "open('/tmp/squatting', 'w').write('yes'); time.sleep(300)"
    )
    sandboxes.exec(info.id, ["sh", "-c", 'python3 -c "$0" "$1" </dev/null >/dev/null 2>&1 &',
                             squat, str(server.port)])  # fmt: skip
    until(lambda: sandboxes.exec(info.id, ["cat", "/tmp/squatting"]).stdout == b"yes")
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as conn:
        assert conn.recv(100) == b"the real server"


def test_egress_goes_through_the_sandboxs_own_interface_and_route(sandboxes: LocalSandboxes) -> None:
    info = sandboxes.create(SandboxSpec())
    interfaces = run(sandboxes, info.id, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
    assert sorted(interfaces.split()) == ["lo", "tap0"]
    routes = [line.split() for line in run(sandboxes, info.id, "cat /proc/net/route").splitlines()]
    default = [r for r in routes[1:] if r[1] == "00000000"]
    assert default and default[0][0] == "tap0" and default[0][2] == "0202000A"  # via 10.0.2.2
    assert run(sandboxes, info.id, "cat /etc/resolv.conf") == "nameserver 10.0.2.3\n"
    # The host's own interfaces are not there: a different network namespace.
    inside = run(sandboxes, info.id, "readlink /proc/self/ns/net").strip()
    assert inside != os.readlink("/proc/self/ns/net")


# -- limits -------------------------------------------------------------------------------------


@pytest.fixture(params=[LimitsMode.CGROUP, LimitsMode.RLIMIT])
def limited(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LocalSandboxes]:
    backend = LocalSandboxes(tmp_path / "limited", limits=request.param, max_pids=96,
                             memory_mb=128)  # fmt: skip
    assert backend.limits().mode is request.param
    yield backend
    for info in backend.list():
        backend.destroy(info.id)


def agent_tasks(uid: int) -> int:
    """Threads on the host running as ``uid``."""
    out = subprocess.run(["ps", "-eLo", "uid="], capture_output=True, text=True).stdout
    return sum(1 for line in out.split() if line == str(uid))


def test_a_fork_bomb_is_held_to_the_agents_limit_while_a_checkpoint_and_the_host_work(
    limited: LocalSandboxes, settings: Settings, db: SqliteDb, blobs: LocalBlobs,
    keys: LocalKeys, remote: Path,
) -> None:
    engine = make_engine(settings, db, blobs, keys, limited, remote)
    bombed, workspace = engine.sandbox()
    neighbour = limited.create(SandboxSpec())
    _, agent = host_uids_of(limited, bombed)
    engine.sh(bombed, "echo work > wip.txt")
    bomb = "setsid bash -c ':(){ :|:& };:' </dev/null >/dev/null 2>&1 &"
    assert limited.exec(bombed, ["sh", "-c", bomb]).ok
    until(lambda: agent_tasks(agent) >= 90)
    assert agent_tasks(agent) <= 96
    # hangar's tools in the same sandbox still run: a whole checkpoint, during the bomb.
    checkpoint = engine.take(bombed, workspace)
    assert engine.checkpointer.contents(checkpoint).has("untracked")
    assert agent_tasks(agent) >= 90, "the bomb was still going"
    assert run(limited, neighbour.id, "echo next door") == "next door\n"
    assert subprocess.run(["true"]).returncode == 0
    limited.destroy(bombed)
    until(lambda: agent_tasks(agent) == 0)


def test_a_memory_hog_is_stopped_at_the_agents_limit(limited: LocalSandboxes) -> None:
    info = limited.create(SandboxSpec())
    hog = limited.exec(info.id, ["/usr/bin/python3", "-c", "b = bytearray(400 << 20); print(1)"])
    assert not hog.ok and hog.stdout == b""
    small = limited.exec(info.id, ["/usr/bin/python3", "-c", "b = bytearray(16 << 20); print(1)"])
    assert small.stdout == b"1\n"
    big = limited.exec(info.id, ["/usr/bin/python3", "-c", "b = bytearray(400 << 20); print(1)"],
                       user=HANGAR)  # fmt: skip
    assert big.stdout == b"1\n"  # the limit binds the agent alone


def test_the_run_supervisor_puts_the_agent_under_its_limits(limited: LocalSandboxes) -> None:
    info = limited.create(SandboxSpec())
    start_run(limited, info.id, "hog", ["/usr/bin/python3", "-c", "b = bytearray(400 << 20)"],
              cwd="/tmp", env={})  # fmt: skip
    _, code = wait_run(limited, info.id, "hog", timeout=60, poll=0.05)
    assert code != 0
    start_run(limited, info.id, "who", ["sh", "-c", "id -u; grep NoNewPrivs /proc/self/status"],
              cwd="/tmp", env={})  # fmt: skip
    log, code = wait_run(limited, info.id, "who", timeout=60, poll=0.05)
    assert (log.split(), code) == ([b"1000", b"NoNewPrivs:", b"1"], 0)
