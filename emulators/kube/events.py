"""The core/v1 Events the stand-in records on a pod as it starts, worded as a real cluster's
components word them (reason, type, source and message format), so that a client reads the
stand-in's events as it would read GKE's.

Where each comes from (the reason and the message format are the component's own):

- kube-scheduler: ``Scheduled`` "Successfully assigned NS/POD to NODE" (``schedule_one.go``);
  ``FailedScheduling`` with the scheduler's FitError, "0/N nodes are available: N Insufficient
  cpu." (``framework/types.go``; "Insufficient cpu" from the NodeResourcesFit plugin) then the
  preemption plugin's "preemption: 0/N nodes are available: N No preemption victims found for
  incoming pod.", the message ``kubectl describe pod`` shows on GKE.
- cluster-autoscaler (kubernetes/autoscaler, ``cluster-autoscaler/FAQ.md`` "What events are
  emitted by CA?", and ``core/scaleup``): ``TriggeredScaleUp`` "pod triggered scale-up:
  [{GROUP CUR->NEW (max: MAX)}]" (GKE names the group by its instance group URL);
  ``NotTriggerScaleUp`` "pod didn't trigger scale-up: REASONS", here "1 in backoff after failed
  scale-up" (the node group backed off after a failed scale-up).
- GKE's cluster autoscaler (``gke-autoscaling``, ``pkg/events``): ``FailedScaleUp`` (Warning)
  "Node scale up in zones ZONES associated with this pod failed: GCE quota exceeded. Pod is at
  risk of not being scheduled.". GKE's own text names no quota; when the knob names one, the
  failure is given as Compute Engine words a quota error on the node's creation ("Quota
  'SSD_TOTAL_GB' exceeded. Limit: 250.0 in region REGION.", the instance group's error): the
  stand-in's one liberty, so a client can be tested on a named quota.
- kubelet (``pkg/kubelet/images/image_manager.go``, reasons from ``pkg/kubelet/events``):
  ``Pulling`` 'Pulling image "IMAGE"'; ``Pulled`` 'Successfully pulled image "IMAGE" in D (D
  including waiting). Image size: N bytes.'; ``Failed`` (Warning) 'Failed to pull image
  "IMAGE": ERR' with containerd's NotFound error, then ``Failed`` "Error: ErrImagePull"
  (``kuberuntime_container.go``, "Error: %v"); ``BackOff`` 'Back-off pulling image "IMAGE"'
  and ``Failed`` "Error: ImagePullBackOff"; ``Created`` "Created container: NAME" and
  ``Started`` "Started container NAME" (``kuberuntime_container.go``).
"""

from __future__ import annotations

from dataclasses import dataclass

SCHEDULER = "default-scheduler"
AUTOSCALER = "cluster-autoscaler"
KUBELET = "kubelet"
NODE = "gke-hangar-sandbox-pool-0a1b2c3d-x9yz"
ZONE = "us-central1-a"
GROUP = ("https://www.googleapis.com/compute/v1/projects/hangar-stand-in/zones/us-central1-a/"
         "instanceGroups/gke-hangar-sandbox-pool-0a1b2c3d-grp")  # fmt: skip
FAILED_SCHEDULING = ("0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are "
                     "available: 3 No preemption victims found for incoming pod.")  # fmt: skip
"""The scheduler's message for a pod no node has room for (also the pod's ``PodScheduled``
condition's message, reason ``Unschedulable``)."""


@dataclass(frozen=True)
class Said:
    """One event to record on the pod: ``type`` Normal or Warning, who said it."""

    type: str
    reason: str
    message: str
    component: str


def unschedulable(quota: str | None) -> list[Said]:
    """What a pod no node has room for gets: the scheduler's refusal and the autoscaler's
    scale-up; with ``quota`` (a quota's name, or "" for GKE's unnamed one) that scale-up
    failing on a Google Cloud quota, then backing off."""
    said = [Said("Warning", "FailedScheduling", FAILED_SCHEDULING, SCHEDULER),
            Said("Normal", "TriggeredScaleUp", f"pod triggered scale-up: [{{{GROUP} 3->4 (max: 10)}}]",
                 AUTOSCALER)]  # fmt: skip
    if quota is not None:
        failure = (f"Quota '{quota}' exceeded. Limit: 250.0 in region us-central1" if quota
                   else "GCE quota exceeded")  # fmt: skip
        said += [Said("Warning", "FailedScaleUp",
                      f"Node scale up in zones {ZONE} associated with this pod failed: {failure}. "
                      "Pod is at risk of not being scheduled.", AUTOSCALER),
                 Said("Normal", "NotTriggerScaleUp",
                      "pod didn't trigger scale-up: 1 in backoff after failed scale-up",
                      AUTOSCALER)]  # fmt: skip
    return said


def scheduled(namespace: str, pod: str, image: str) -> list[Said]:
    """A pod placed on a node, its image being pulled."""
    return [Said("Normal", "Scheduled", f"Successfully assigned {namespace}/{pod} to {NODE}", SCHEDULER),
            Said("Normal", "Pulling", f'Pulling image "{image}"', KUBELET)]  # fmt: skip


def pull_failed(image: str) -> list[Said]:
    """An image the registry does not have: the pull's failure, then the back-off."""
    error = (f'rpc error: code = NotFound desc = failed to pull and unpack image "{image}": '
             f'failed to resolve reference "{image}": {image}: not found')  # fmt: skip
    return [Said("Warning", "Failed", f'Failed to pull image "{image}": {error}', KUBELET),
            Said("Warning", "Failed", "Error: ErrImagePull", KUBELET),
            Said("Normal", "BackOff", f'Back-off pulling image "{image}"', KUBELET),
            Said("Warning", "Failed", "Error: ImagePullBackOff", KUBELET)]  # fmt: skip


def started(image: str, containers: list[str]) -> list[Said]:
    """An image pulled and the pod's containers started."""
    said = [Said("Normal", "Pulled", f'Successfully pulled image "{image}" in 1.204s (1.204s '
                 "including waiting). Image size: 31457280 bytes.", KUBELET)]  # fmt: skip
    for name in containers:
        said += [Said("Normal", "Created", f"Created container: {name}", KUBELET),
                 Said("Normal", "Started", f"Started container {name}", KUBELET)]  # fmt: skip
    return said
