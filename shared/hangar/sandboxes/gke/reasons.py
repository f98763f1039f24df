"""Why a GKE sandbox's pod is not ready yet, read from the pod's core/v1 Events.

A claim's ``Ready`` condition says only that its sandbox waits; the pod's events say on what.
:func:`explain` reads them (as listed, camelCase JSON: ``reason``, ``message``,
``lastTimestamp``...) oldest first, keeping what the latest of each concern says, and answers
in hangar's words:

- a node (the scheduler's ``FailedScheduling``; the cluster autoscaler's ``TriggeredScaleUp``,
  ``NotTriggerScaleUp``, GKE's ``FailedScaleUp``; cleared by ``Scheduled``):
  ``adding a node to the cluster``, ``a Google Cloud quota is exhausted (NAME)`` (the name
  where a message carries Compute Engine's ``Quota 'NAME' exceeded``; GKE's own event says
  only ``GCE quota exceeded``), ``no node can be added to the cluster: MESSAGE``,
  ``waiting for a node: MESSAGE``;
- the image (the kubelet's ``Pulling``, cleared by ``Pulled``): ``pulling the image IMAGE``;
- an image that cannot be pulled (``Failed`` 'Failed to pull image "IMAGE": ERR', ``Error:
  ErrImagePull``, ``BackOff`` 'Back-off pulling image "IMAGE"', ``InspectFailed``,
  ``ErrImageNeverPull``; cleared by ``Pulled``): FAILED, ``the image IMAGE cannot be pulled
  (REASON): ERR`` with the registry's error as the kubelet reported it.

A failed pull wins (the start fails at once: the kubelet would only retry the same pull), then
a pull under way, then the node. Nothing said (or a pod already pulled and starting): None,
and the claim's own reason stands. Pure: no client, no clock. The events are untrusted only
as far as the cluster is (the agent cannot write them); messages are cut to
:data:`MESSAGE_LIMIT` characters.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from hangar.sandboxes import SandboxState, SandboxStatus

ADDING_A_NODE = "adding a node to the cluster"
QUOTA = "a Google Cloud quota is exhausted"
MESSAGE_LIMIT = 300

_IMAGE = re.compile(r'image "([^"]+)"')
_PULL_FAILED = re.compile(r'^Failed to pull image "([^"]+)": (.*)$', re.DOTALL)
_QUOTA_NAME = re.compile(r"Quota '([A-Za-z0-9_-]+)' exceeded")
_PULL_ERRORS = ("Error: ErrImagePull", "Error: ImagePullBackOff", "Error: InvalidImageName",
                "Error: ErrImageNeverPull")  # fmt: skip


def explain(events: Iterable[Mapping[str, Any]]) -> SandboxStatus | None:
    """The status the pod's ``events`` give (the module's docstring), or None when they say
    nothing that the claim's condition does not."""
    node: str | None = None
    pulling: str | None = None
    failed: str | None = None
    quota_failed = False
    for event in sorted(events, key=_order):
        reason = str(event.get("reason") or "")
        message = _cut(str(event.get("message") or ""))
        if reason == "Scheduled":
            node, quota_failed = None, False
        elif reason == "TriggeredScaleUp":
            node = ADDING_A_NODE
        elif reason == "FailedScaleUp" and ("quota exceeded" in message.lower()
                                            or _QUOTA_NAME.search(message)):  # fmt: skip
            name = _QUOTA_NAME.search(message)
            node, quota_failed = f"{QUOTA} ({name[1]})" if name else QUOTA, True
        elif reason == "FailedScaleUp":
            node = f"adding a node to the cluster failed: {message}"
        elif reason == "NotTriggerScaleUp" and not quota_failed:
            node = f"no node can be added to the cluster: {message}"
        elif reason == "FailedScheduling" and node is None:
            node = f"waiting for a node: {message}"
        elif reason == "Pulling":
            pulling = f"pulling the image {_image(message)}"
        elif reason == "Pulled":
            pulling = failed = None
        elif reason == "Failed" and (m := _PULL_FAILED.match(message)):
            failed = f"the image {m[1]} cannot be pulled (ErrImagePull): {m[2]}"
        elif failed is None and _pull_error(reason, message):
            failed = (
                f"the image {_image(message)} cannot be pulled ({reason}): {message}"
            )
    if failed is not None:
        return SandboxStatus(SandboxState.FAILED, failed)
    if pulling is not None:
        return SandboxStatus(SandboxState.PENDING, pulling)
    if node is not None:
        return SandboxStatus(SandboxState.PENDING, node)
    return None


def _pull_error(reason: str, message: str) -> bool:
    if reason in ("InspectFailed", "ErrImageNeverPull"):
        return True
    if reason == "BackOff":
        return message.startswith("Back-off pulling image")
    return reason == "Failed" and message in _PULL_ERRORS


def _image(message: str) -> str:
    found = _IMAGE.search(message)
    return found[1] if found else "of the sandbox"


def _cut(text: str) -> str:
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 1] + "…"


def _order(event: Mapping[str, Any]) -> tuple[str, int]:
    """Oldest first: by when it was last seen (``lastTimestamp``, else ``eventTime``, else
    ``firstTimestamp``; RFC 3339 strings in UTC sort as times), then by resourceVersion where
    it is a number (within one second)."""
    when = (
        event.get("lastTimestamp")
        or event.get("eventTime")
        or event.get("firstTimestamp")
        or ""
    )
    rv = str((event.get("metadata") or {}).get("resourceVersion") or "")
    return (str(when)[:19], int(rv) if rv.isdigit() else 0)
