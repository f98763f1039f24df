"""The Kubernetes Agent Sandbox objects the ``gke://`` backend writes and reads.

Pure functions over plain manifests (no client here): the ``SandboxTemplate`` and
``SandboxWarmPool`` of one image and pod settings, the ``SandboxClaim`` of one hangar sandbox,
and how a claim's ``Ready`` condition reads as a :class:`~hangar.sandboxes.SandboxStatus`.
Field names are those of the Agent Sandbox v1beta1 Go types.
"""

from __future__ import annotations

import hashlib
import json
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
OWN_LABELS = (MANAGED_BY, SANDBOX_ID)

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
    """What, beside the image, defines a sandbox's pod (and so its template and pool)."""

    memory_mb: int = 4096
    cpu: str = "1"
    runtime_class: str | None = None
    replicas: int = 0


def _name(image: str, pod: PodSettings) -> str:
    settings = {k: v for k, v in asdict(pod).items() if k != "replicas"}
    key = json.dumps({"image": image, "pod": settings}, sort_keys=True).encode()
    return f"hangar-{hashlib.sha256(key).hexdigest()[:12]}"


def template(image: str, pod: PodSettings) -> dict[str, Any]:
    """The SandboxTemplate of ``image`` with ``pod``'s settings; its name is a hash of both,
    so a change of either is a new template (and pool), never an edit of a live one."""
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
        "metadata": {"name": _name(image, pod), "labels": {MANAGED_BY: "hangar"}},
        "spec": {
            "podTemplate": {"metadata": {"labels": {MANAGED_BY: "hangar"}}, "spec": spec},
            "envVarsInjectionPolicy": "Disallowed",  # env goes in through exec, never a claim
        },
    }


def warm_pool(image: str, pod: PodSettings) -> dict[str, Any]:
    """The SandboxWarmPool over :func:`template`'s template, same name, ``pod.replicas``
    ready sandboxes kept."""
    name = _name(image, pod)
    return {
        "apiVersion": f"{EXTENSIONS_GROUP}/{VERSION}",
        "kind": "SandboxWarmPool",
        "metadata": {"name": name, "labels": {MANAGED_BY: "hangar"}},
        "spec": {"replicas": pod.replicas, "sandboxTemplateRef": {"name": name}},
    }


def claim(sandbox_id: str, pool: str, labels: Mapping[str, str],
          created_at: datetime) -> dict[str, Any]:  # fmt: skip
    """The SandboxClaim ``sandbox_id`` on ``pool``, labelled (and its pod labelled) with
    ``labels`` plus hangar's own; never ``env`` (a claim with env is always a cold start)."""
    own = {**labels, MANAGED_BY: "hangar", SANDBOX_ID: sandbox_id}
    return {
        "apiVersion": f"{EXTENSIONS_GROUP}/{VERSION}",
        "kind": "SandboxClaim",
        "metadata": {"name": sandbox_id, "labels": own,
                     "annotations": {CREATED_AT: created_at.isoformat()}},
        "spec": {"warmPoolRef": {"name": pool}, "additionalPodMetadata": {"labels": own}},
    }  # fmt: skip


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
