"""Pods as records: what the controller creates for a Sandbox and how their status moves.

A pod here runs nothing; its status is a function of its age and the :class:`Knobs` in force
while it is not yet Ready (a Ready pod stays Ready). Conditions, reasons and the events
(:func:`start_events`, worded in :mod:`.events`) are the ones a real cluster shows, so a client
can report them as start-up reasons:

- ``node_scale_up``: Pending, ``PodScheduled`` False ``Unschedulable`` (the scheduler's
  message); events FailedScheduling, TriggeredScaleUp;
- ``quota_exhausted`` (true, or a quota's name): as ``node_scale_up``, and the scale-up fails
  on a Google Cloud quota: events FailedScaleUp, NotTriggerScaleUp;
- ``image_pull_failure``: scheduled, Pending, its container waiting with ``ErrImagePull``;
  events Scheduled, Pulling, Failed, BackOff;
- otherwise scheduled and Pending (``ContainerCreating``, events Scheduled, Pulling) until
  ``ready_delay`` seconds after creation, then Running and Ready (events Pulled, Created,
  Started).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from . import events
from .events import Said
from .store import Obj, now

LAUNCH_TYPE = "agents.x-k8s.io/launch-type"
POD_NAME = "agents.x-k8s.io/pod-name"


@dataclass
class Knobs:
    """How the stand-in makes pods start; tests change them while it runs."""

    ready_delay: float = 0.0
    image_pull_failure: bool = False
    quota_exhausted: bool | str = False
    """True, or the name of the Google Cloud quota the node's creation exceeds."""
    node_scale_up: bool = False
    denied: list[str] = field(default_factory=list)
    """Access reviews answered not allowed: ``"VERB RESOURCE"`` (``"create pods/exec"``,
    ``"list events"``; ``*`` for every verb or resource)."""
    agent_sandbox: bool = True
    """Whether the Agent Sandbox groups are served (False: a cluster without the add-on)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def update(self, change: dict[str, Any]) -> None:
        """Set the named knobs; ValueError on an unknown name or a wrong type."""
        names = {f.name: f.type for f in fields(self)}
        for key, value in change.items():
            if key not in names:
                raise ValueError(f"unknown knob {key!r} (knobs: {sorted(names)})")
            if key == "ready_delay":
                if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                    raise ValueError("ready_delay must be a number of seconds >= 0")
                value = float(value)
            elif key == "denied":
                if not isinstance(value, list) or not all(
                        isinstance(v, str) and len(v.split()) == 2 for v in value):  # fmt: skip
                    raise ValueError('denied must be a list of "VERB RESOURCE" strings')
                value = list(value)
            elif key == "quota_exhausted" and isinstance(value, str):
                if not value.replace("_", "").isalnum():
                    raise ValueError("quota_exhausted must be true, false or a quota's name")
            elif not isinstance(value, bool):
                raise ValueError(f"{key} must be true or false")
            setattr(self, key, value)


def condition(conds: list[Obj], type_: str, status: str, reason: str, message: str = "") -> list[Obj]:
    """``conds`` with condition ``type_`` set; its ``lastTransitionTime`` moves only when its
    status changes, so setting the same condition twice changes nothing."""
    old = next((c for c in conds if c.get("type") == type_), None)
    since = old["lastTransitionTime"] if old and old.get("status") == status else now()
    new = {"type": type_, "status": status, "reason": reason, "message": message,
           "lastTransitionTime": since}  # fmt: skip
    return [c for c in conds if c.get("type") != type_] + [new]


def ready(obj: Obj | None) -> bool:
    """Whether ``obj`` (a pod, sandbox or claim) has condition Ready True."""
    conds = (obj or {}).get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def not_ready_reason(pod: Obj) -> str:
    """Why a pod is not Ready, as ``Reason: message`` (empty when nothing says)."""
    status = pod.get("status", {})
    for c in status.get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return f"{c.get('reason')}: {c.get('message')}"
    for cs in status.get("containerStatuses") or []:
        waiting = cs.get("state", {}).get("waiting")
        if waiting:
            return f"{waiting.get('reason')}: {waiting.get('message', '')}".rstrip(": ")
    return ""


def pod_status(pod: Obj, knobs: Knobs, age: float, ip: str) -> Obj:
    """The status ``pod`` should have ``age`` seconds after creation under ``knobs``."""
    status: Obj = dict(pod.get("status") or {})
    if ready(pod):
        return status
    conds: list[Obj] = list(status.get("conditions") or [])
    containers = [c.get("name", "main") for c in pod.get("spec", {}).get("containers") or []]
    first: Obj = next(iter(pod.get("spec", {}).get("containers") or []), {})
    image = str(first.get("image", ""))
    status["phase"] = "Pending"
    if knobs.node_scale_up or knobs.quota_exhausted:
        conds = condition(conds, "PodScheduled", "False", "Unschedulable", events.FAILED_SCHEDULING)
        status["conditions"] = conds
        return status
    conds = condition(conds, "PodScheduled", "True", "")
    status["hostIP"] = "10.128.0.2"
    if knobs.image_pull_failure:
        waiting = {"reason": "ErrImagePull",
                   "message": f'failed to pull and unpack image "{image}": not found'}  # fmt: skip
    elif age < knobs.ready_delay:
        waiting = {"reason": "ContainerCreating"}
    else:
        status["phase"] = "Running"
        status.update(podIP=ip, podIPs=[{"ip": ip}], startTime=now())
        status["containerStatuses"] = [
            {"name": n, "ready": True, "restartCount": 0, "image": image, "imageID": "",
             "started": True, "state": {"running": {"startedAt": now()}}} for n in containers
        ]  # fmt: skip
        for type_ in ("Initialized", "ContainersReady", "Ready"):
            conds = condition(conds, type_, "True", "")
        status["conditions"] = conds
        return status
    status["containerStatuses"] = [
        {"name": n, "ready": False, "restartCount": 0, "image": image, "imageID": "",
         "started": False, "state": {"waiting": waiting}} for n in containers
    ]  # fmt: skip
    conds = condition(conds, "Ready", "False", "ContainersNotReady",
                      f"containers with unready status: [{' '.join(containers)}]")  # fmt: skip
    status["conditions"] = conds
    return status


def start_events(pod: Obj, knobs: Knobs) -> list[Said]:
    """Every event ``pod`` should carry by now, in order, given its status (set by
    :func:`pod_status`) and ``knobs``: the controller records those not yet recorded."""
    meta, status = pod.get("metadata", {}), pod.get("status") or {}
    containers = [c.get("name", "main") for c in pod.get("spec", {}).get("containers") or []]
    first: Obj = next(iter(pod.get("spec", {}).get("containers") or []), {})
    image = str(first.get("image", ""))
    conds = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    if conds.get("PodScheduled") == "False":
        quota = knobs.quota_exhausted
        return events.unschedulable(None if quota is False else "" if quota is True else quota)
    said = events.scheduled(str(meta.get("namespace", "")), str(meta.get("name", "")), image)
    if ready(pod):
        return said + events.started(image, containers)
    if knobs.image_pull_failure:
        return said + events.pull_failed(image)
    return said
