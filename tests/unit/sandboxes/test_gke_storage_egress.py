"""Direct checkpoints need the sandboxes to reach the storage endpoint: the NetworkPolicy hangar
writes into every SandboxTemplate lets a pod reach Google's storage addresses on 443, and never
the metadata server or the cluster's own ranges."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from hangar.sandboxes.gke.config import control_plane
from hangar.sandboxes.gke.manifests import Network, network_policy

# storage.googleapis.com answers from Google's public ranges (IPv4 and IPv6), or from the
# private.googleapis.com / restricted.googleapis.com addresses where a network routes there.
STORAGE_ADDRESSES = ("142.250.74.123", "172.217.16.187", "216.58.206.59", "199.36.153.8",
                     "199.36.153.4", "2a00:1450:4001:80b::201b")  # fmt: skip


def allows(policy: dict[str, Any], address: str, port: int = 443) -> bool:
    """Whether ``policy``'s egress rules let a pod open TCP ``port`` to ``address`` (only
    ipBlock peers can match an address; a rule with no ``to`` matches every one)."""
    ip = ipaddress.ip_address(address)
    for rule in policy["egress"]:
        ports = rule.get("ports")
        if ports and not any(p.get("protocol", "TCP") == "TCP" and p.get("port") == port
                             for p in ports):  # fmt: skip
            continue
        peers = rule.get("to")
        if not peers:
            return True
        for peer in peers:
            block = peer.get("ipBlock")
            if block is None:
                continue
            cidr = ipaddress.ip_network(block["cidr"])
            if ip.version != cidr.version or ip not in cidr:
                continue
            if not any(ip in ipaddress.ip_network(e) for e in block.get("except", [])
                       if ipaddress.ip_network(e).version == ip.version):  # fmt: skip
                return True
    return False


@pytest.mark.parametrize("address", STORAGE_ADDRESSES)
def test_the_sandboxes_policy_lets_a_pod_reach_the_storage_endpoint(address: str) -> None:
    policy = network_policy(Network(), control_plane("https://34.118.1.2"))
    assert allows(policy, address)


@pytest.mark.parametrize("address", ["169.254.169.254", "10.0.0.2", "172.16.5.4",
                                     "192.168.1.1", "34.118.1.2", "fd20:ce::254"])
def test_the_same_policy_still_keeps_the_metadata_server_the_cluster_and_its_api_away(
    address: str,
) -> None:
    policy = network_policy(Network(), control_plane("https://34.118.1.2"))
    assert not allows(policy, address)
