"""The doctor's look at what isolates local sandboxes on this machine: it makes a probe sandbox
and asks it, from inside, who its processes run as, which network it has, what it may reach
(the packet filter's rules, and a connection to the metadata server's address and to one of the
host's own, both refused inside the sandbox before any packet leaves), what limits the agent
and what caps its disk; it counts sandboxes of the previous layout still running."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from hangar.cli.doctor.report import Report
from hangar.config import Settings
from hangar.errors import HangarError
from hangar.sandboxes import HANGAR_TMP, SandboxSpec, SandboxUser
from hangar.sandboxes.local.disk import Disk
from hangar.sandboxes.local.network import host_addresses, refused
from hangar.sandboxes.local.isolation import INNER_AGENT, LimitsMode

# Each HOST:PORT tried from inside: "HOST:PORT ERRNO-NAME" ("connected" when it was not refused).
_TRY = """
import errno, socket, sys
for target in sys.argv[1:]:
    host, _, port = target.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=3).close()
        print(target, "connected")
    except OSError as exc:
        print(target, errno.errorcode.get(exc.errno, type(exc).__name__))
"""


def isolation(report: Report, settings: Settings) -> None:
    """One line per layer: user namespace, uid split, own network, limits; FAIL saying why
    where this machine cannot give one."""
    from hangar.sandboxes.local import LocalSandboxes

    backend = LocalSandboxes.from_url(settings.sandboxes, settings)
    try:
        limits = backend.limits()
    except HangarError as exc:
        report.line("FAIL", f"sandbox limits: {exc.message}")
        return
    try:
        outdated = [info.id for info in backend.list() if info.outdated]
    except OSError as exc:
        report.line("WARN", f"cannot list the sandboxes in {backend.root}: {exc}")
        outdated = []
    report.check(not outdated, "no sandbox of the previous layout is running",
                 f"{len(outdated)} sandbox(es) of the previous layout (the host's user and "
                 "network namespaces) still run: restart hangar serve, which checkpoints and "
                 f"replaces them ({', '.join(outdated[:5])})", "WARN")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="hangar-doctor-") as tmp:
        disk = backend.disk
        probe = LocalSandboxes(Path(tmp) / "sandboxes", None, uid_base=backend.uid_base,
                               limits=limits.mode, max_pids=limits.max_pids,
                               memory_mb=limits.memory_mb,
                               disk_gb=disk.cap / 2**30 if disk else 0)  # fmt: skip
        try:
            info = probe.create(SandboxSpec())
        except HangarError as exc:
            report.line("FAIL", f"local sandboxes cannot start on this machine: {exc.message}")
            return
        try:
            agent = probe.exec(info.id, ["sh", "-c", "id -u; cat /proc/self/uid_map"])
            ours = probe.exec(info.id, ["id", "-u"], user=SandboxUser.HANGAR)
            network = probe.exec(info.id, ["cat", "/proc/net/dev", "/proc/net/route"])
            rules = probe.network_rules(info.id)
            host = host_addresses()
            targets = ["169.254.169.254:80"] + [f"{n.network_address}:80" for n in host.v4[:1]]
            tried = probe.exec(info.id, ["/usr/bin/python3", "-I", "-c", _TRY, *targets])
            volumes = probe.exec(info.id, ["stat", "-f", "-c", "%n %T %S %b %i", "/workspace",
                                           "/dev/shm", HANGAR_TMP], user=SandboxUser.HANGAR)
        except HangarError as exc:
            report.line("FAIL", f"the probe sandbox does not answer: {exc.message}")
            return
        finally:
            probe.destroy(info.id)
    lines = agent.stdout.decode().split("\n")
    mapping = [line.split() for line in lines[1:] if line.strip()]
    hosts = {int(inside): int(host) for inside, host, _count in mapping}
    in_userns = bool(hosts) and 0 not in hosts.values()
    report.check(in_userns, "user namespace: a sandbox's root is an unprivileged host uid "
                 f"({hosts.get(0)})", "user namespace: the probe sandbox's uid 0 is the host's "
                 "root")  # fmt: skip
    split = (lines[0].strip() == str(INNER_AGENT) and ours.stdout.strip() == b"0"
             and hosts.get(INNER_AGENT) not in (None, hosts.get(0)))  # fmt: skip
    report.check(split, f"uid split: the agent is uid {INNER_AGENT} (host {hosts.get(INNER_AGENT)})"
                 f", hangar's tools uid 0 (host {hosts.get(0)})",
                 "uid split: the agent and hangar's tools do not run as two users")  # fmt: skip
    own_net = b"tap0" in network.stdout
    report.check(own_net, "own network: egress through slirp4netns, the host's loopback refused "
                 "(an environment's --host-port opens one port)",
                 "own network: the probe sandbox has no tap0 interface")  # fmt: skip
    said = tried.stdout.decode().splitlines()
    outcomes = dict(line.split(" ", 1) for line in said if " " in line)
    through = [f"{t} {outcomes.get(t, 'untried')}" for t in targets
               if outcomes.get(t) != "EHOSTUNREACH"]  # fmt: skip
    report.check(tried.ok and not through,
                 f"network filter: the agent is refused {', '.join(targets)}; refused are the "
                 "host's own addresses (those it gets later too) and the link-local, multicast "
                 f"and broadcast ranges ({len(refused(host))} destinations); everything else "
                 "egresses",
                 "network filter: from the probe sandbox, "
                 + (", ".join(through) if tried.ok else _tail(tried.stderr))
                 + " (expected: refused, EHOSTUNREACH)")  # fmt: skip
    for rule in rules.splitlines():
        if "reject" in rule or "accept" in rule:
            report.line("INFO", f"network rule: {rule.strip()}")
    for name, body in re.findall(r"set (\w+) \{(.*?)\n\s*\}", rules, re.S):
        elements = re.search(r"elements = \{(.*?)\}", body, re.S)
        shown = " ".join(elements.group(1).split()) if elements else "(empty)"
        report.line("INFO", f"network set {name} (the host's own addresses): {shown}")
    how = ("cgroup v1 pids and memory (all the agent's processes together)"
           if limits.mode is LimitsMode.CGROUP
           else "rlimits (memory per process: RLIMIT_AS)")  # fmt: skip
    report.line("OK", f"limits on the agent: {limits.max_pids} processes and threads, "
                f"{limits.memory_mb} MB, through {how}")  # fmt: skip
    _disk(report, settings, backend.root, disk, volumes.stdout.decode())


def _disk(report: Report, settings: Settings, root: Path, disk: Disk | None, seen: str) -> None:
    """The disk cap as the probe sandbox saw it (``stat -f`` of its /workspace, /dev/shm and
    hangar's scratch folder), and whether the host's disk holds every sandbox's cap."""
    if disk is None:
        report.line("WARN", "disk: no cap (HANGAR_SANDBOX_DISK_GB=0): a sandbox's writes can "
                    "fill the host's disk")  # fmt: skip
        return
    found = {f[0]: f[1:] for f in (line.split() for line in seen.splitlines()) if len(f) == 5}
    work, shm, scratch = (found.get(p) for p in ("/workspace", "/dev/shm", HANGAR_TMP))
    size = int(work[1]) * int(work[2]) if work else 0
    capped = (work is not None and work[0] == "ext2/ext3" and shm == work and scratch is not None
              and scratch[0] == "ext2/ext3" and scratch[3] != work[3]
              and disk.cap * 0.9 <= size <= disk.size)  # fmt: skip
    report.check(capped, f"disk: each sandbox writes to an ext4 volume of its own of "
                 f"{disk.cap / 2**30:g} GiB (HOME, /workspace, /tmp, /dev/shm, /hangar; a loop "
                 "device mounted in the sandbox's mount namespace alone): past it, writes fail "
                 "inside with ENOSPC; hangar's scratch folder is on a volume of its own, "
                 "as large",
                 f"disk: the probe sandbox's folders are not on a capped volume of their own: "
                 f"{seen.strip() or 'no answer'}")  # fmt: skip
    try:
        st = os.statvfs(root if root.exists() else root.parent)
    except OSError:
        return
    free, most = st.f_bavail * st.f_frsize, settings.max_sandboxes * disk.size
    report.check(most <= free, f"disk: {settings.max_sandboxes} sandboxes (HANGAR_MAX_SANDBOXES) "
                 f"at their cap fit in the {free / 2**30:.0f} GiB free for them",
                 f"disk: {settings.max_sandboxes} sandboxes (HANGAR_MAX_SANDBOXES) at their cap "
                 f"would write {most / 2**30:.0f} GiB, more than the {free / 2**30:.0f} GiB free "
                 f"where they live ({root}): lower HANGAR_SANDBOX_DISK_GB or "
                 "HANGAR_MAX_SANDBOXES", "WARN")  # fmt: skip


def _tail(data: bytes) -> str:
    return data.decode(errors="replace").strip()[-300:] or "no output"
