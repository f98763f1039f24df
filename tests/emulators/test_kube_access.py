"""The stand-in's SelfSubjectAccessReviews and its Agent Sandbox switch, read with the official
client: reviews allowed unless the ``denied`` knob names the verb and resource; with
``agent_sandbox`` off the Agent Sandbox groups are neither discovered nor served."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from emulators.kube import KubeStandIn
from tests.emulators.test_kube_standin import AGENTS, EXT, V, api

__all__ = ["api"]  # a fixture, used by name


@pytest.fixture
def stand_in() -> Iterator[KubeStandIn]:
    with KubeStandIn() as server:
        yield server


def review(api: client.ApiClient, verb: str, resource: str, sub: str = "") -> bool:
    attrs = {"namespace": "default", "verb": verb, "resource": resource,
             **({"subresource": sub} if sub else {})}  # fmt: skip
    body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attrs}}  # fmt: skip
    return bool(
        client.AuthorizationV1Api(api)
        .create_self_subject_access_review(body)
        .status.allowed
    )


def test_an_access_review_is_allowed_unless_the_knob_denies_its_verb_and_resource(
    stand_in: KubeStandIn, api: client.ApiClient
) -> None:
    assert review(api, "create", "pods", "exec") and review(api, "list", "events")
    stand_in.set_knobs(denied=["create pods/exec", "* sandboxclaims"])
    assert not review(api, "create", "pods", "exec")
    assert not review(api, "delete", "sandboxclaims")
    assert review(api, "get", "pods") and review(api, "list", "events")


def test_the_authorization_group_is_discovered_at_its_own_version(
    api: client.ApiClient,
) -> None:
    groups = {
        g.name: g.preferred_version.version
        for g in client.ApisApi(api).get_api_versions().groups
    }
    assert groups["authorization.k8s.io"] == "v1" and groups[EXT] == V


def test_with_the_agent_sandbox_off_its_groups_are_not_discovered_nor_served(
    stand_in: KubeStandIn, api: client.ApiClient
) -> None:
    stand_in.set_knobs(agent_sandbox=False)
    names = {g.name for g in client.ApisApi(api).get_api_versions().groups}
    assert AGENTS not in names and EXT not in names
    with pytest.raises(client.ApiException) as exc:
        client.CustomObjectsApi(api).list_namespaced_custom_object(
            EXT, V, "default", "sandboxclaims"
        )
    assert exc.value.status == 404
