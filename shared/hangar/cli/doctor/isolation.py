"""The doctor's look at what isolates local sandboxes on this machine: it makes a probe sandbox
and asks it, from inside, who its processes run as, which network it has, what it may reach
(the packet filter's rules, and a connection to the metadata server's address and to one of the
host's own, both refused inside the sandbox before any packet leaves) and what limits the agent;
it counts sandboxes of the previous layout still running."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hangar.cli.doctor.report import Report
from hangar.config import Settings
from hangar.errors import HangarError
from hangar.sandboxes import SandboxSpec, SandboxUser
from hangar.sandboxes.network import host_addresses, refused
from hangar.sandboxes.isolation import INNER_AGENT, LimitsMode

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
        probe = LocalSandboxes(Path(tmp) / "sandboxes", None, uid_base=backend.uid_base,
                               limits=limits.mode, max_pids=limits.max_pids,
                               memory_mb=limits.memory_mb)  # fmt: skip
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
        except HangarError as exc:
            report.line("FAIL", f"the probe sandbox does not answer: {exc.message}")
            return
        finally:
            probe.destroy(info.id, hooks=False)
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
                 "host's own addresses (as they were when the sandbox started) and the "
                 f"link-local, multicast and broadcast ranges ({len(refused(host))} "
                 "destinations); everything else egresses",
                 "network filter: from the probe sandbox, "
                 + (", ".join(through) if tried.ok else _tail(tried.stderr))
                 + " (expected: refused, EHOSTUNREACH)")  # fmt: skip
    for rule in rules.splitlines():
        if "reject" in rule or "accept" in rule:
            report.line("INFO", f"network rule: {rule.strip()}")
    how = ("cgroup v1 pids and memory (all the agent's processes together)"
           if limits.mode is LimitsMode.CGROUP
           else "rlimits (memory per process: RLIMIT_AS)")  # fmt: skip
    report.line("OK", f"limits on the agent: {limits.max_pids} processes and threads, "
                f"{limits.memory_mb} MB, through {how}")  # fmt: skip


def _tail(data: bytes) -> str:
    return data.decode(errors="replace").strip()[-300:] or "no output"
