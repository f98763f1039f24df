"""Reading a starting pod's core/v1 Events as hangar's start-up reasons
(:mod:`hangar.sandboxes.gke.reasons`): one test per event a cluster records, then how they
combine (the latest of each concern, a failed pull first)."""

from __future__ import annotations

from typing import Any

from hangar.sandboxes import SandboxState, SandboxStatus
from hangar.sandboxes.gke.reasons import ADDING_A_NODE, MESSAGE_LIMIT, explain

IMAGE = "us-docker.pkg.dev/p/r/env:1"
SCHEDULING = ("0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are "
              "available: 3 No preemption victims found for incoming pod.")  # fmt: skip
PULL_ERROR = (f'rpc error: code = NotFound desc = failed to pull and unpack image "{IMAGE}": '
              f'failed to resolve reference "{IMAGE}": {IMAGE}: not found')  # fmt: skip


def ev(reason: str, message: str, second: int = 0, rv: int = 0) -> dict[str, Any]:
    return {"reason": reason, "message": message, "metadata": {"resourceVersion": str(rv)},
            "lastTimestamp": f"2026-12-05T01:00:{second:02d}Z"}  # fmt: skip


def pending(reason: str) -> SandboxStatus:
    return SandboxStatus(SandboxState.PENDING, reason)


def test_no_events_say_nothing() -> None:
    assert explain([]) is None


def test_failed_scheduling_alone_is_waiting_for_a_node_with_the_schedulers_words() -> (
    None
):
    assert explain([ev("FailedScheduling", SCHEDULING)]) == pending(
        f"waiting for a node: {SCHEDULING}"
    )


def test_triggered_scale_up_is_adding_a_node_even_while_scheduling_keeps_failing() -> (
    None
):
    events = [ev("FailedScheduling", SCHEDULING, 1, 1),
              ev("TriggeredScaleUp", "pod triggered scale-up: [{mig 3->4 (max: 10)}]", 2, 2),
              ev("FailedScheduling", SCHEDULING, 9, 3)]  # fmt: skip
    assert explain(events) == pending(ADDING_A_NODE)


def test_gkes_failed_scale_up_on_a_quota_is_a_google_cloud_quota_exhausted() -> None:
    message = ("Node scale up in zones us-central1-a associated with this pod failed: GCE quota "
               "exceeded. Pod is at risk of not being scheduled.")  # fmt: skip
    assert explain([ev("FailedScaleUp", message)]) == pending(
        "a Google Cloud quota is exhausted"
    )


def test_a_quota_named_in_the_message_is_named() -> None:
    message = ("Node scale up in zones us-central1-a associated with this pod failed: Quota "
               "'SSD_TOTAL_GB' exceeded. Limit: 250.0 in region us-central1. Pod is at risk "
               "of not being scheduled.")  # fmt: skip
    assert explain([ev("FailedScaleUp", message)]) == pending(
        "a Google Cloud quota is exhausted (SSD_TOTAL_GB)"
    )


def test_not_trigger_scale_up_after_a_quota_failure_stays_the_quota() -> None:
    events = [ev("FailedScaleUp", "... failed: GCE quota exceeded. Pod is at risk ...", 1, 1),
              ev("NotTriggerScaleUp", "pod didn't trigger scale-up: 1 in backoff after failed "
                 "scale-up", 2, 2)]  # fmt: skip
    assert explain(events) == pending("a Google Cloud quota is exhausted")


def test_not_trigger_scale_up_alone_says_no_node_can_be_added_and_why() -> None:
    message = "pod didn't trigger scale-up: 1 max node group size reached"
    assert explain([ev("NotTriggerScaleUp", message)]) == pending(
        f"no node can be added to the cluster: {message}"
    )


def test_another_failed_scale_up_says_the_node_could_not_be_added() -> None:
    status = explain(
        [
            ev(
                "FailedScaleUp",
                "Node scale up in zones z associated with this pod "
                "failed: GCE out of resources. Pod is at risk of not being scheduled.",
            )
        ]
    )
    assert status is not None and status.state is SandboxState.PENDING
    assert status.reason.startswith("adding a node to the cluster failed: ")
    assert "GCE out of resources" in status.reason


def test_scheduled_clears_the_node_reasons() -> None:
    events = [ev("TriggeredScaleUp", "pod triggered scale-up: [{mig 0->1 (max: 3)}]", 1, 1),
              ev("Scheduled", "Successfully assigned default/p to node-1", 2, 2)]  # fmt: skip
    assert explain(events) is None


def test_pulling_is_pulling_the_image_named() -> None:
    assert explain([ev("Pulling", f'Pulling image "{IMAGE}"')]) == pending(
        f"pulling the image {IMAGE}"
    )


def test_pulled_clears_pulling() -> None:
    events = [ev("Pulling", f'Pulling image "{IMAGE}"', 1, 1),
              ev("Pulled", f'Successfully pulled image "{IMAGE}" in 1s (1s including waiting). '
                 "Image size: 1 bytes.", 2, 2)]  # fmt: skip
    assert explain(events) is None


def test_a_failed_pull_fails_with_the_registrys_error() -> None:
    status = explain([ev("Failed", f'Failed to pull image "{IMAGE}": {PULL_ERROR}')])
    assert status == SandboxStatus(
        SandboxState.FAILED,
        f"the image {IMAGE} cannot be pulled (ErrImagePull): {PULL_ERROR}",
    )


def test_err_image_pull_and_the_back_off_after_keep_the_registrys_error() -> None:
    events = [ev("Pulling", f'Pulling image "{IMAGE}"', 1, 1),
              ev("Failed", f'Failed to pull image "{IMAGE}": {PULL_ERROR}', 2, 2),
              ev("Failed", "Error: ErrImagePull", 2, 3),
              ev("BackOff", f'Back-off pulling image "{IMAGE}"', 3, 4),
              ev("Failed", "Error: ImagePullBackOff", 3, 5),
              ev("Pulling", f'Pulling image "{IMAGE}"', 9, 6)]  # fmt: skip
    status = explain(events)
    assert status is not None and status.state is SandboxState.FAILED
    assert PULL_ERROR in status.reason


def test_a_back_off_alone_still_fails_the_pull() -> None:
    status = explain([ev("BackOff", f'Back-off pulling image "{IMAGE}"')])
    assert status is not None and status.state is SandboxState.FAILED
    assert (
        status.reason
        == f'the image {IMAGE} cannot be pulled (BackOff): Back-off pulling image "{IMAGE}"'
    )


def test_a_back_off_restarting_a_container_is_not_a_pull_failure() -> None:
    assert (
        explain(
            [ev("BackOff", "Back-off restarting failed container sandbox in pod p")]
        )
        is None
    )


def test_an_image_name_that_cannot_be_parsed_fails() -> None:
    message = (
        'Failed to apply default image tag "Bad Image": couldn\'t parse image name'
    )
    status = explain([ev("InspectFailed", message)])
    assert (
        status is not None
        and status.state is SandboxState.FAILED
        and message in status.reason
    )


def test_a_pull_failure_wins_over_a_node_reason_and_a_pull_under_way() -> None:
    events = [
        ev("TriggeredScaleUp", "pod triggered scale-up: [{mig 0->1 (max: 3)}]", 1, 1),
        ev("Failed", "Error: ErrImagePull", 5, 2),
        ev("Pulling", f'Pulling image "{IMAGE}"', 6, 3),
    ]
    status = explain(events)
    assert status is not None and status.state is SandboxState.FAILED


def test_events_are_read_in_time_order_then_resource_version_not_list_order() -> None:
    events = [ev("Pulled", f'Successfully pulled image "{IMAGE}" in 1s', 5, 7),
              ev("Pulling", f'Pulling image "{IMAGE}"', 5, 6),
              ev("Pulling", f'Pulling image "{IMAGE}"', 1, 9)]  # fmt: skip
    assert explain(events) is None


def test_a_long_message_is_cut() -> None:
    status = explain([ev("FailedScheduling", "x" * 5000)])
    assert status is not None and len(status.reason) < MESSAGE_LIMIT + 40
