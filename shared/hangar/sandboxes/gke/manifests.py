"""The Kubernetes Agent Sandbox objects the ``gke://`` backend writes and reads.

Pure functions over plain manifests (no client here): the names of a pool (one per
environment) and of its templates (one per image, pod settings and network), the
``SandboxTemplate`` with its NetworkPolicy, the ``SandboxWarmPool``, the ``SandboxClaim`` of one
hangar sandbox with its lease, and how a claim's ``Ready`` condition reads as a
:class:`~hangar.sandboxes.SandboxStatus`. Field names are those of the Agent Sandbox v1beta1 Go
types (``extensions/api/v1beta1``; the NetworkPolicy's rules are ``networking.k8s.io/v1``'s).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from hangar.sandboxes import SandboxState, SandboxStatus

AGENTS_GROUP = "agents.x-k8s.io"
EXTENSIONS_GROUP = "extensions.agents.x-k8s.io"
VERSION = "v1beta1"
SANDBOXES = "sandboxes"
TEMPLATES = "sandboxtemplates"
POOLS = "sandboxwarmpools"
CLAIMS = "sandboxclaims"

MANAGED_BY = "app.kubernetes.io/managed-by"
"""Label on everything hangar makes (value ``hangar``): what ``list`` selects on."""
SANDBOX_ID = "hangar.sandbox"
"""The claim's own id, on the claim and (through ``additionalPodMetadata``) on its pod."""
CREATED_AT = "hangar.created-at"
"""Annotation: when hangar asked for the claim, to the microsecond (``creationTimestamp`` has
whole seconds only, too coarse to order sandboxes made in one second)."""
POD_NAME = "agents.x-k8s.io/pod-name"
"""Annotation on a Sandbox whose pod is not named after it."""
POOL_LABEL = "hangar.pool"
"""Label on a template: the pool it was made for (what template GC lists)."""
TEMPLATE_LABEL = "hangar.template"
"""Label on a claim: the template its pool pointed at when the claim was made (GC keeps a
template while a claim names it: deleting a template deletes its NetworkPolicy)."""
OWN_LABELS = (MANAGED_BY, SANDBOX_ID, TEMPLATE_LABEL)

AGENT_CAPABILITIES = ("SETUID", "SETGID", "KILL", "DAC_OVERRIDE", "DAC_READ_SEARCH", "CHOWN",
                      "FOWNER")  # fmt: skip
"""What the pod's root keeps: exactly what the uid split needs (become the agent, signal it,
read and write its files), as hangar's side of a local sandbox."""

KEEP_UP = ["/bin/sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 86400 & wait $!; done"]
"""The pod's command: stay up, doing nothing, until the pod is deleted (every command runs
through exec)."""

# A claim's Ready reason or message holding one of these will never turn Ready: the sandbox
# has failed (destroy it). Everything else not Ready is pending (a pod being scheduled, an
# image being pulled, a node being added).
FATAL = (
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
    "CrashLoopBackOff",
    "EnvVarsInjectionRejected",
    "ClaimExpired",
)


@dataclass(frozen=True)
class PodSettings:
    """What, beside the image, defines a sandbox's pod (and so its template)."""

    memory_mb: int = 4096
    cpu: str = "1"
    runtime_class: str | None = None


METADATA_RANGES = ("169.254.169.254/32", "169.254.0.0/16", "fd20:ce::254/128")
"""The metadata server (IPv4, and GKE's IPv6 address of it) and the link-local range it lives
in: never reachable from a pod, whatever the URL's ``deny`` says."""
INTERNAL_RANGES = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10",
                   "fd00::/8", "fe80::/10")  # fmt: skip
"""The cluster's internal ranges a pod may not reach unless the URL's ``deny`` says otherwise:
the private and shared address spaces (nodes, pods, services, a private control plane)."""
DNS_PEERS = ({"k8s-app": "kube-dns"}, {"k8s-app": "node-local-dns"})
"""The pods in ``kube-system`` that answer a pod's DNS: kube-dns, and the node-local cache that
answers in its stead where NodeLocal DNSCache is on (a policy is checked against the pod that
answers, so both are named)."""

DEFAULT_POOL = "hangar-default"
"""The pool of a spec that names none (every other pool name ends in a hash, so never this)."""


@dataclass(frozen=True)
class Network:
    """What a sandbox's pod may reach: egress anywhere but ``denied`` (CIDRs, IPv4 and IPv6)
    and :data:`METADATA_RANGES`, plus DNS to :data:`DNS_PEERS`; no ingress."""

    denied: tuple[str, ...] = INTERNAL_RANGES


def pool_name(pool: str | None) -> str:
    """The SandboxWarmPool of a spec's ``pool`` (an environment's name): ``hangar-<slug>-<6
    hex>``, a DNS-1123 label short enough for the pool's sandboxes' names, the hash of the raw
    name keeping distinct names apart; :data:`DEFAULT_POOL` for None."""
    if pool is None:
        return DEFAULT_POOL
    slug = re.sub(r"[^a-z0-9]+", "-", pool.lower()).strip("-")[:30].strip("-")
    digest = hashlib.sha256(pool.encode()).hexdigest()[:6]
    return f"hangar-{slug}-{digest}" if slug else f"hangar-{digest}"


def template_name(pool: str, image: str, pod: PodSettings, policy: Mapping[str, Any]) -> str:
    """A template's name: its pool's and a hash of what defines it, so a change of image, pod
    settings or network ``policy`` is a new template (the pool repointed), never an edit of a
    live one."""
    key = json.dumps({"image": image, "pod": asdict(pod), "network": policy},
                     sort_keys=True).encode()  # fmt: skip
    return f"{pool}-{hashlib.sha256(key).hexdigest()[:10]}"


def network_policy(network: Network, control_plane: tuple[str, ...] = ()) -> dict[str, Any]:
    """The template's ``networkPolicy`` (v1beta1 ``NetworkPolicySpec``: ingress and egress
    rules of ``networking.k8s.io/v1``): no ingress rule (all ingress denied); egress to DNS
    (port 53, UDP and TCP, on :data:`DNS_PEERS` in ``kube-system``) and to every address but
    the metadata ranges, ``network.denied`` and ``control_plane`` (CIDRs)."""
    denied = [*METADATA_RANGES, *network.denied, *control_plane]
    v4 = sorted({c for c in denied if ":" not in c}, key=denied.index)
    v6 = sorted({c for c in denied if ":" in c}, key=denied.index)
    system = {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}
    dns = {"to": [{"namespaceSelector": system, "podSelector": {"matchLabels": dict(peer)}}
                  for peer in DNS_PEERS],
           "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}
    anywhere = {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": v4}},
                       {"ipBlock": {"cidr": "::/0", "except": v6}}]}  # fmt: skip
    return {"ingress": [], "egress": [dns, anywhere]}


def template(name: str, pool: str, image: str, pod: PodSettings,
             policy: Mapping[str, Any]) -> dict[str, Any]:  # fmt: skip
    """The SandboxTemplate ``name`` of ``pool``: ``image`` with ``pod``'s settings and the
    network ``policy`` (:func:`network_policy`), managed by the controller."""
    spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "containers": [{
            "name": "sandbox",
            "image": image,
            "command": list(KEEP_UP),
            "securityContext": {
                "runAsUser": 0,
                "runAsNonRoot": False,
                "capabilities": {"drop": ["ALL"], "add": list(AGENT_CAPABILITIES)},
            },
            "resources": {
                "requests": {"cpu": pod.cpu, "memory": f"{pod.memory_mb}Mi"},
                "limits": {"memory": f"{pod.memory_mb}Mi"},
            },
        }],
    }  # fmt: skip
    if pod.runtime_class:
        spec["runtimeClassName"] = pod.runtime_class
    return {
        "apiVersion": f"{EXTENSIONS_GROUP}/{VERSION}",
        "kind": "SandboxTemplate",
        "metadata": {"name": name, "labels": {MANAGED_BY: "hangar", POOL_LABEL: pool}},
        "spec": {
            "podTemplate": {"metadata": {"labels": {MANAGED_BY: "hangar"}}, "spec": spec},
            "networkPolicy": dict(policy),
            "networkPolicyManagement": "Managed",
            "envVarsInjectionPolicy": "Disallowed",  # env goes in through exec, never a claim
        },
    }


def warm_pool(pool: str, template: str, replicas: int) -> dict[str, Any]:
    """The SandboxWarmPool ``pool`` over ``template``, ``replicas`` ready sandboxes kept;
    ``Recreate``: when it is repointed, its unclaimed sandboxes of the old template go at once
    (never handed out with an old image)."""
    return {
        "apiVersion": f"{EXTENSIONS_GROUP}/{VERSION}",
        "kind": "SandboxWarmPool",
        "metadata": {"name": pool, "labels": {MANAGED_BY: "hangar"}},
        "spec": pool_spec(template, replicas),
    }


def pool_spec(template: str, replicas: int) -> dict[str, Any]:
    """A pool's spec (what a repointing or rescaling merge-patches)."""
    return {"replicas": replicas, "sandboxTemplateRef": {"name": template},
            "updateStrategy": {"type": "Recreate"}}


def claim(sandbox_id: str, pool: str, labels: Mapping[str, str], created_at: datetime,
          shutdown: datetime | None = None, template: str | None = None) -> dict[str, Any]:  # fmt: skip
    """The SandboxClaim ``sandbox_id`` on ``pool``, labelled (and its pod labelled) with
    ``labels`` plus hangar's own; never ``env`` (a claim with env is always a cold start).
    ``shutdown``: when the cluster deletes it (and its sandbox) if hangar has not;
    ``template``: the pool's template now (:data:`TEMPLATE_LABEL`)."""
    own = {**labels, MANAGED_BY: "hangar", SANDBOX_ID: sandbox_id}
    spec: dict[str, Any] = {"warmPoolRef": {"name": pool}, "additionalPodMetadata": {"labels": own}}
    if shutdown is not None:
        spec["lifecycle"] = {"shutdownTime": rfc3339(shutdown), "shutdownPolicy": "Delete"}
    marks = {TEMPLATE_LABEL: template} if template else {}
    return {
        "apiVersion": f"{EXTENSIONS_GROUP}/{VERSION}",
        "kind": "SandboxClaim",
        "metadata": {"name": sandbox_id, "labels": {**own, **marks},
                     "annotations": {CREATED_AT: created_at.isoformat()}},
        "spec": spec,
    }  # fmt: skip


def rfc3339(when: datetime) -> str:
    """A ``metav1.Time``: UTC, whole seconds, ``Z``."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def shutdown_time(obj: Mapping[str, Any]) -> datetime | None:
    """A claim's ``lifecycle.shutdownTime``, if set."""
    raw = ((obj.get("spec") or {}).get("lifecycle") or {}).get("shutdownTime")
    if isinstance(raw, datetime):
        return raw.astimezone(UTC)
    if not raw:
        return None
    return datetime.fromisoformat(str(raw)).astimezone(UTC)


def user_labels(obj: Mapping[str, Any]) -> dict[str, str]:
    """An object's labels without hangar's own."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return {k: str(v) for k, v in labels.items() if k not in OWN_LABELS}


def created_at(obj: Mapping[str, Any]) -> datetime:
    """When hangar asked for the claim (its annotation), else its ``creationTimestamp``."""
    meta = obj.get("metadata") or {}
    raw = (meta.get("annotations") or {}).get(CREATED_AT) or meta.get("creationTimestamp")
    if isinstance(raw, datetime):
        return raw.astimezone(UTC)
    try:
        return datetime.fromisoformat(str(raw)).astimezone(UTC)
    except ValueError:
        return datetime.fromtimestamp(0, UTC)


def bound_sandbox(obj: Mapping[str, Any]) -> str | None:
    """The name of the Sandbox the claim holds, if any."""
    name = ((obj.get("status") or {}).get("sandbox") or {}).get("name")
    return str(name) if name else None


def pod_name(sandbox: Mapping[str, Any]) -> str:
    """A Sandbox's pod: the ``agents.x-k8s.io/pod-name`` annotation, else the Sandbox's name."""
    meta = sandbox.get("metadata") or {}
    return str((meta.get("annotations") or {}).get(POD_NAME) or meta["name"])


def claim_status(obj: Mapping[str, Any]) -> SandboxStatus:
    """Ready when the claim's ``Ready`` condition is True and it holds a sandbox; failed when
    its reason or message names a :data:`FATAL` one; pending otherwise, with the reason."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    if ready is None:
        return SandboxStatus(SandboxState.PENDING, "the claim waits for its sandbox")
    reason = str(ready.get("reason") or "")
    message = str(ready.get("message") or "")
    if str(ready.get("status")) == "True" and bound_sandbox(obj):
        return SandboxStatus(SandboxState.READY)
    said = ": ".join(p for p in (reason, message) if p) or "the sandbox is not ready"
    if any(token in reason or token in message for token in FATAL):
        return SandboxStatus(SandboxState.FAILED, said)
    return SandboxStatus(SandboxState.PENDING, said)
