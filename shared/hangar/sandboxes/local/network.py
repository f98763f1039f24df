"""What a local sandbox may reach: the packet filter in its own network namespace.

A sandbox's only way out is slirp4netns, which makes each of the sandbox's connections afresh
from the host. ``--disable-host-loopback`` keeps it off the host's loopback, but a connection
to any other address of the host (``curl http://<the host's external address>:PORT/``) would
reach every service bound to ``0.0.0.0``, and one to 169.254.169.254 the cloud's metadata
server. So the launcher installs an nftables table, :data:`TABLE`, in the sandbox's network
namespace before anything runs in it. Its one chain, on the output hook, lets the sandbox's
own loopback through (where the host-port relay listens) and refuses, with an ICMP
"administratively prohibited" (the caller sees ``EHOSTUNREACH`` at once), every packet to:

- link-local addresses (169.254.0.0/16, fe80::/10, the metadata server's included), multicast
  (224.0.0.0/4, ff00::/8) and the limited broadcast, which the host's own listeners would get;
- every address of the host itself, IPv4 and IPv6, any interface: the host's local routing
  table as it is when the sandbox starts (its addresses, their broadcast addresses and any
  local route), loopback aside (slirp4netns refuses that already), in two sets; and each
  address the host gets later, which a watcher the launcher leaves running beside the sandbox
  (it follows the kernel's address news) adds to them within milliseconds.

Everything else egresses as before. The filter is the kernel's and lives in the sandbox's
namespace: the agent (no capability) cannot change it, and neither can hangar's in-sandbox
tools (CAP_NET_ADMIN is not among theirs) nor the init (none at all). Limits: an address the
host gets is refused a few milliseconds later, not at once (the watcher runs ``nft`` when the
kernel tells it); one the host drops stays refused; a local route added without an address
(``ip route add local ...``) is refused only to sandboxes started after it.
"""

from __future__ import annotations

import ipaddress
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from hangar.errors import SandboxError
from hangar.sandboxes.local.processes import HOST_ENV, host_tool

TABLE = "hangar"
"""The nftables table (family ``inet``) each sandbox's namespace holds."""
HOST_V4 = "host4"
HOST_V6 = "host6"
SETS = {"4": f"inet {TABLE} {HOST_V4}", "6": f"inet {TABLE} {HOST_V6}"}
"""The sets of the host's own addresses, by IP version, as ``nft add element`` names them."""

REFUSED_V4 = ("169.254.0.0/16", "224.0.0.0/4", "255.255.255.255/32")
REFUSED_V6 = ("fe80::/10", "ff00::/8")

_FIB_TRIE = Path("/proc/net/fib_trie")
_IPV6_ROUTE = Path("/proc/net/ipv6_route")
_RTF_LOCAL = 0x80000000
_RTF_ANYCAST = 0x00100000
_LOOPBACK_V4 = ipaddress.IPv4Network("127.0.0.0/8")
_LOOPBACK_V6 = ipaddress.IPv6Network("::1/128")

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class HostAddresses:
    """The destinations that are the host itself (collapsed, loopback left out)."""

    v4: tuple[ipaddress.IPv4Network, ...]
    v6: tuple[ipaddress.IPv6Network, ...]


def host_addresses(fib_trie: Path = _FIB_TRIE, ipv6_route: Path = _IPV6_ROUTE) -> HostAddresses:
    """The host's local destinations, read from the calling process's network namespace.

    IPv4: the ``LOCAL`` and ``BROADCAST`` entries of ``/proc/net/fib_trie``; IPv6: the local
    and anycast routes of ``/proc/net/ipv6_route``. A file that cannot be read (IPv6 off, for
    one) gives nothing for its family."""
    v4: list[ipaddress.IPv4Network] = []
    try:
        trie = fib_trie.read_text()
    except OSError:
        trie = ""
    address = ""
    for raw in trie.splitlines():
        line = raw.strip()
        if line.startswith("|-- "):
            address = line[4:]
        elif line.startswith("/") and address:
            fields = line.split()
            if len(fields) >= 3 and fields[-1] in ("LOCAL", "BROADCAST"):
                net = ipaddress.IPv4Network(f"{address}{fields[0]}", strict=False)
                if not net.subnet_of(_LOOPBACK_V4):
                    v4.append(net)
    v6: list[ipaddress.IPv6Network] = []
    try:
        routes = ipv6_route.read_text()
    except OSError:
        routes = ""
    for line in routes.splitlines():
        fields = line.split()
        if len(fields) < 10 or not int(fields[8], 16) & (_RTF_LOCAL | _RTF_ANYCAST):
            continue
        dest = ipaddress.IPv6Address(int(fields[0], 16))
        net6 = ipaddress.IPv6Network(f"{dest}/{int(fields[1], 16)}", strict=False)
        if net6 != _LOOPBACK_V6:
            v6.append(net6)
    # What the fixed ranges refuse already (the host's link-local addresses) is left out.
    fixed4 = [ipaddress.IPv4Network(n) for n in REFUSED_V4]
    fixed6 = [ipaddress.IPv6Network(n) for n in REFUSED_V6]
    v4 = [n for n in v4 if not any(n.subnet_of(f) for f in fixed4)]
    v6 = [n6 for n6 in v6 if not any(n6.subnet_of(f) for f in fixed6)]
    return HostAddresses(v4=tuple(ipaddress.collapse_addresses(v4)),
                         v6=tuple(ipaddress.collapse_addresses(v6)))  # fmt: skip


def ruleset(host: HostAddresses) -> str:
    """The nftables script the launcher loads into a new sandbox's namespace (``nft -f``): the
    host's addresses are in the sets :data:`SETS` names, which the launcher's watcher adds to."""
    v4 = f" elements = {_set(host.v4)};" if host.v4 else ""
    v6 = f" elements = {_set(host.v6)};" if host.v6 else ""
    return "\n".join([
        f"table inet {TABLE} {{",
        f"  set {HOST_V4} {{ type ipv4_addr; flags interval;{v4} }}",
        f"  set {HOST_V6} {{ type ipv6_addr; flags interval;{v6} }}",
        "  chain output {",
        "    type filter hook output priority filter; policy accept;",
        '    oifname "lo" accept',
        f"    ip daddr {_set(REFUSED_V4)} reject with icmp type admin-prohibited",
        f"    ip6 daddr {_set(REFUSED_V6)} reject with icmpv6 type admin-prohibited",
        f"    ip daddr @{HOST_V4} reject with icmp type admin-prohibited",
        f"    ip6 daddr @{HOST_V6} reject with icmpv6 type admin-prohibited",
        "  }",
        "}",
        "",
    ])  # fmt: skip


def known(host: HostAddresses) -> list[str]:
    """What the watcher need not add: every refused network, and loopback."""
    return [*refused(host), str(_LOOPBACK_V4), str(_LOOPBACK_V6)]


def refused(host: HostAddresses) -> list[str]:
    """Every refused destination, for people: the fixed ranges, then the host's addresses."""
    return [*REFUSED_V4, *REFUSED_V6, *(str(n) for n in (*host.v4, *host.v6))]


def _set(networks: Iterable[Network | str]) -> str:
    return "{ " + ", ".join(_shown(n) for n in networks) + " }"


def _shown(net: Network | str) -> str:
    net = ipaddress.ip_network(net)
    single = net.prefixlen == net.max_prefixlen
    return str(net.network_address) if single else str(net)


def listed(init_pid: int) -> str:
    """:data:`TABLE` as ``nft`` lists it in the network namespace of host pid ``init_pid``
    (run as root). SandboxError if it cannot be listed."""
    argv = [host_tool("nsenter") or "nsenter", "--target", str(init_pid), "--net", "--",
            host_tool("nft") or "nft", "list", "table", "inet", TABLE]  # fmt: skip
    try:
        done = subprocess.run(argv, capture_output=True, env=HOST_ENV, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise SandboxError(f"cannot list a sandbox's network rules: {exc}") from exc
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip()[-2000:]
        raise SandboxError(f"cannot list a sandbox's network rules: {said}")
    return done.stdout.decode()
