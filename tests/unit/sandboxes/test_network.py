"""What a sandbox may reach, tried from the agent's side of a real sandbox.

The host's "external interface" is a veth pair the test makes (the host's end gets an address,
the other end lives in a network namespace of the test's own); the "outside" is another pair
whose far end, in a namespace of its own, holds a listener. Every address used belongs to these
namespaces: nothing is sent anywhere else, and a refused packet never leaves the sandbox."""

from __future__ import annotations

import ctypes
import ipaddress
import os
import random
import re
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from hangar.sandboxes import SandboxSpec, SandboxUser
from hangar.sandboxes.local import LocalSandboxes
from hangar.sandboxes.local.network import HostAddresses, host_addresses, ruleset

pytestmark = pytest.mark.sandbox

CLONE_NEWNET = 0x40000000

# One program, one run in the sandbox: each HOST:PORT tried, "got GREETING" or "refused ERRNO".
CONNECT = """
import errno, socket, sys
for target in sys.argv[1:]:
    host, _, port = target.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=5) as s:
            print(target, "got", s.recv(100).decode())
    except OSError as exc:
        print(target, "refused", errno.errorcode.get(exc.errno, type(exc).__name__))
"""


class Server:
    """A TCP listener on an address (in the test's own network namespace, or in ``netns``) that
    answers every connection with ``greeting``."""

    def __init__(self, address: str, greeting: bytes, netns: str | None = None) -> None:
        made: list[socket.socket | BaseException] = []
        thread = threading.Thread(target=lambda: made.append(_listen(address, netns)))
        thread.start()  # setns moves the calling thread only: a thread of its own, then gone
        thread.join()
        if isinstance(made[0], BaseException):
            raise made[0]
        self.sock = made[0]
        self.address = f"{address}:{self.sock.getsockname()[1]}"
        self.greeting = greeting
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.sendall(self.greeting)

    def close(self) -> None:
        # shutdown wakes the accept (close alone would not): a socket left in a namespace
        # keeps the namespace, and its veth, alive after `ip netns del`.
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def _listen(address: str, netns: str | None) -> socket.socket | BaseException:
    try:
        if netns is not None:
            with open(f"/run/netns/{netns}") as ns:
                if ctypes.CDLL(None, use_errno=True).setns(ns.fileno(), CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), f"setns into {netns}")
        return socket.create_server((address, 0))
    except OSError as exc:
        return exc


@dataclass
class Net:
    """The test's networks: ``host`` and ``host6`` are addresses of the host itself, ``outside``
    a listener beyond it, ``link_local`` a listener on a link-local address beyond it; ``spare``
    and ``spare6`` are free for the host to get on ``link``, its end of the first pair."""

    host: Server
    host6: str
    outside: Server
    link_local: Server
    link: str
    spare: str
    spare6: str


def ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)
    assert done.returncode == 0, f"ip {' '.join(args)}: {done.stderr}"


@pytest.fixture
def net() -> Iterator[Net]:
    if shutil.which("ip") is None:
        pytest.fail("ip (iproute2) is not installed: run `make test-packages`", pytrace=False)
    tag = os.urandom(3).hex()
    taken = host_addresses()
    while True:  # two /30s and a /64 no address of this host is in
        block = ipaddress.IPv4Network(f"10.213.{random.randrange(256)}.0/28")
        v6 = ipaddress.IPv6Network(f"fd13:{random.randrange(1 << 16):x}::/64")
        if not any(n.overlaps(block) for n in taken.v4) and not any(n.overlaps(v6) for n in taken.v6):
            break
    first, second = list(block.subnets(new_prefix=30))[:2]
    ext, out = f"hgx-{tag}", f"hgo-{tag}"  # the external interface's peer, and the outside
    link_local = f"169.254.{random.randrange(1, 255)}.{random.randrange(1, 255)}"
    made: list[str] = []
    links: list[str] = []
    servers: list[Server] = []
    pairs = ((ext, "hgxh", "hgxp", first), (out, "hgoh", "hgop", second))
    try:
        for ns, near, far, subnet in pairs:
            ip("netns", "add", ns)
            made.append(ns)
            near, far = f"{near}{tag}", f"{far}{tag}"
            links.append(near)
            ip("link", "add", near, "type", "veth", "peer", "name", far, "netns", ns)
            ip("addr", "add", f"{subnet[1]}/30", "dev", near)
            ip("link", "set", near, "up")
            ip("-n", ns, "addr", "add", f"{subnet[2]}/30", "dev", far)
            ip("-n", ns, "link", "set", far, "up")
            ip("-n", ns, "link", "set", "lo", "up")
            if ns == ext:
                ip("-6", "addr", "add", f"{v6[1]}/64", "dev", near, "nodad")
            else:  # a link-local address beyond the host, reached through this pair
                ip("-n", ns, "addr", "add", f"{link_local}/32", "dev", far)
                ip("route", "add", f"{link_local}/32", "dev", near)
        servers += [Server(str(first[1]), b"the host"), Server(str(second[2]), b"outside", out),
                    Server(link_local, b"metadata", out)]  # fmt: skip
        yield Net(host=servers[0], host6=str(v6[1]), outside=servers[1], link_local=servers[2],
                  link=links[0], spare=str(block[9]), spare6=str(v6[2]))  # fmt: skip
    finally:
        for server in servers:
            server.close()
        for link in links:  # a veth pair goes with either end
            subprocess.run(["ip", "link", "del", link], capture_output=True, timeout=10)
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)


def connect(sandboxes: LocalSandboxes, sandbox_id: str, *targets: str,
            user: SandboxUser = SandboxUser.AGENT) -> dict[str, str]:  # fmt: skip
    result = sandboxes.exec(sandbox_id, ["/usr/bin/python3", "-I", "-c", CONNECT, *targets],
                            user=user)  # fmt: skip
    assert result.ok, result
    lines = [line.split(" ", 1) for line in result.stdout.decode().splitlines()]
    return {target: outcome for target, outcome in lines}


def reach_from_host(server: Server) -> bytes:
    host, _, port = server.address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=5) as conn:
        return conn.recv(100)


@pytest.mark.parametrize("user", list(SandboxUser))
def test_an_address_of_the_hosts_own_interface_is_refused_though_the_host_reaches_it(
    sandboxes: LocalSandboxes, net: Net, user: SandboxUser
) -> None:
    assert reach_from_host(net.host) == b"the host"
    info = sandboxes.create(SandboxSpec())
    outcome = connect(sandboxes, info.id, net.host.address, user=user)
    assert outcome == {net.host.address: "refused EHOSTUNREACH"}


def test_a_link_local_address_is_refused_though_a_listener_answers_there(
    sandboxes: LocalSandboxes, net: Net
) -> None:
    assert reach_from_host(net.link_local) == b"metadata"
    info = sandboxes.create(SandboxSpec())
    outcome = connect(sandboxes, info.id, net.link_local.address)
    assert outcome == {net.link_local.address: "refused EHOSTUNREACH"}


def test_an_outside_address_and_an_allowed_host_port_are_still_reached(
    sandboxes: LocalSandboxes, net: Net
) -> None:
    stub = Server("127.0.0.1", b"model stub")
    try:
        port = int(stub.address.rpartition(":")[2])
        info = sandboxes.create(SandboxSpec(host_ports=[port]))
        outcome = connect(sandboxes, info.id, net.outside.address, stub.address)
        assert outcome == {net.outside.address: "got outside", stub.address: "got model stub"}
    finally:
        stub.close()


def test_the_rules_name_the_hosts_addresses_and_neither_user_inside_can_change_them(
    sandboxes: LocalSandboxes, net: Net
) -> None:
    info = sandboxes.create(SandboxSpec())
    rules = sandboxes.network_rules(info.id)
    for refused in (net.host.address.rpartition(":")[0], net.host6, "169.254.0.0/16", "fe80::/10"):
        assert refused in rules
    for user in SandboxUser:
        flush = sandboxes.exec(info.id, ["/usr/sbin/nft", "flush", "ruleset"], user=user)
        assert not flush.ok and b"Operation not permitted" in flush.stderr, flush
    assert sandboxes.network_rules(info.id) == rules
    assert connect(sandboxes, info.id, net.host.address)[net.host.address] == "refused EHOSTUNREACH"


def test_the_hosts_addresses_are_its_local_and_broadcast_routes_loopback_and_link_local_aside(
    tmp_path: Path,
) -> None:
    trie = tmp_path / "fib_trie"
    trie.write_text(
        "Local:\n  +-- 0.0.0.0/0 3 0 5\n"
        "     |-- 10.1.2.3\n        /32 host LOCAL\n"
        "     |-- 10.1.2.255\n        /32 link BROADCAST\n"
        "     |-- 10.1.2.0\n        /24 link UNICAST\n"
        "     |-- 10.9.0.0\n        /16 host LOCAL\n"
        "     |-- 10.9.4.4\n        /32 host LOCAL\n"
        "     |-- 127.0.0.1\n        /32 host LOCAL\n"
        "     |-- 169.254.3.4\n        /32 host LOCAL\n"
    )
    routes = tmp_path / "ipv6_route"
    row = "{} {} " + "0" * 32 + " 00 " + "0" * 32 + " 00000000 00000002 00000000 {} eth0\n"
    routes.write_text(
        row.format("fd000000000000000000000000000002", "80", "80200001")  # local
        + row.format("fd000000000000000000000000000000", "40", "00000001")  # a prefix route
        + row.format("00000000000000000000000000000001", "80", "80200001")  # loopback
        + row.format("fe800000000000000000000000000001", "80", "80200001")  # link-local
    )
    found = host_addresses(trie, routes)
    assert [str(n) for n in found.v4] == ["10.1.2.3/32", "10.1.2.255/32", "10.9.0.0/16"]
    assert [str(n) for n in found.v6] == ["fd00::2/128"]
    script = ruleset(found)
    assert "set host4 { type ipv4_addr; flags interval; elements = { 10.1.2.3, 10.1.2.255, " \
        "10.9.0.0/16 }; }" in script
    assert "set host6 { type ipv6_addr; flags interval; elements = { fd00::2 }; }" in script
    assert "ip daddr @host4 reject" in script and "ip6 daddr @host6 reject" in script
    assert "set host4 { type ipv4_addr; flags interval; }" in ruleset(HostAddresses(v4=(), v6=()))


def test_an_address_the_host_gets_after_the_sandbox_started_is_refused_moments_later(
    sandboxes: LocalSandboxes, net: Net
) -> None:
    info = sandboxes.create(SandboxSpec())
    ip("addr", "add", f"{net.spare}/32", "dev", net.link)
    ip("-6", "addr", "add", f"{net.spare6}/128", "dev", net.link, "nodad")
    late = Server(net.spare, b"a new address")
    try:
        assert reach_from_host(late) == b"a new address"
        deadline = time.monotonic() + 10
        while not {net.spare, net.spare6} <= set(re.findall(r"[0-9a-f.:]+", sandboxes.network_rules(info.id))):
            assert time.monotonic() < deadline, sandboxes.network_rules(info.id)
            time.sleep(0.02)
        assert connect(sandboxes, info.id, late.address) == {late.address: "refused EHOSTUNREACH"}
    finally:
        late.close()
