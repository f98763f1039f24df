"""The kinds the stand-in serves and the v1beta1 field schemas it checks them against.

Field names follow the Agent Sandbox Go types (``api/v1beta1/sandbox_types.go`` and
``extensions/api/v1beta1/sandbox{claim,template,warmpool}_types.go``, v0.5.x). A schema is
nested Python values:

- a ``dict`` is an object whose keys are the only fields allowed (an unknown one is refused as
  a strict server refuses it); a key ending in ``!`` is required;
- ``[S]`` is a list of ``S``; ``ANY`` accepts anything (used for core Kubernetes structures
  the stand-in does not model, such as a ``PodSpec``); ``STR``, ``INT``, ``BOOL`` and ``MAP``
  (string to string) are scalars; an :class:`Enum` is a string from a fixed set.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class _Scalar:
    def __init__(self, name: str, types: tuple[type, ...]) -> None:
        self.name = name
        self.types = types


ANY = _Scalar("any", ())
STR = _Scalar("string", (str,))
INT = _Scalar("integer", (int,))
BOOL = _Scalar("boolean", (bool,))
MAP = _Scalar("map[string]string", (dict,))


@dataclass(frozen=True)
class Enum:
    """A string that must be one of ``values``."""

    values: tuple[str, ...]


OBJECT_META: dict[str, Any] = {
    "name": STR, "generateName": STR, "namespace": STR, "uid": STR, "resourceVersion": STR,
    "generation": INT, "creationTimestamp": ANY, "deletionTimestamp": ANY,
    "deletionGracePeriodSeconds": INT, "labels": MAP, "annotations": MAP,
    "ownerReferences": ANY, "finalizers": [STR], "managedFields": ANY, "selfLink": STR,
}  # fmt: skip
POD_METADATA = {"labels": MAP, "annotations": MAP}
EMBEDDED_META = {"name": STR, "labels": MAP, "annotations": MAP}
POD_TEMPLATE = {"metadata": POD_METADATA, "spec!": ANY}
PVC_TEMPLATE = {"metadata": EMBEDDED_META, "spec!": ANY}
CONDITIONS = [{"type!": STR, "status!": STR, "reason": STR, "message": STR,
               "lastTransitionTime": ANY, "observedGeneration": INT}]  # fmt: skip
BLUEPRINT = {"podTemplate!": POD_TEMPLATE, "volumeClaimTemplates": [PVC_TEMPLATE], "service": BOOL}

SANDBOX = {
    "spec!": {**BLUEPRINT, "shutdownTime": ANY, "shutdownPolicy": Enum(("Delete", "Retain")),
              "operatingMode": Enum(("Running", "Suspended"))},
    "status": {"serviceFQDN": STR, "service": STR, "conditions": CONDITIONS, "selector": STR,
               "podIPs": [STR], "nodeName": STR},
}  # fmt: skip
CLAIM = {
    "spec!": {
        "warmPoolRef!": {"name!": STR},
        "lifecycle": {"shutdownTime": ANY, "ttlSecondsAfterFinished": INT,
                      "shutdownPolicy": Enum(("Delete", "DeleteForeground", "Retain"))},
        "additionalPodMetadata": POD_METADATA,
        "env": [{"name!": STR, "value!": STR, "containerName": STR}],
        "volumeClaimTemplates": [PVC_TEMPLATE],
    },
    "status": {"conditions": CONDITIONS, "sandbox": {"name": STR, "podIPs": [STR]}},
}  # fmt: skip
_POLICY = Enum(("Disallowed", "Allowed", "Overrides"))
# networking.k8s.io/v1 NetworkPolicyIngressRule / EgressRule, what the template's
# NetworkPolicySpec holds (its podSelector and policyTypes are the controller's, not allowed).
LABEL_SELECTOR = {"matchLabels": MAP,
                  "matchExpressions": [{"key!": STR, "operator!": Enum(("In", "NotIn", "Exists",
                                                                       "DoesNotExist")),
                                        "values": [STR]}]}  # fmt: skip
NETWORK_PEER = {"podSelector": LABEL_SELECTOR, "namespaceSelector": LABEL_SELECTOR,
                "ipBlock": {"cidr!": STR, "except": [STR]}}  # fmt: skip
NETWORK_PORT = {"protocol": Enum(("TCP", "UDP", "SCTP")), "port": ANY, "endPort": INT}
NETWORK_POLICY = {"ingress": [{"from": [NETWORK_PEER], "ports": [NETWORK_PORT]}],
                  "egress": [{"to": [NETWORK_PEER], "ports": [NETWORK_PORT]}]}  # fmt: skip
TEMPLATE = {
    "spec!": {
        **BLUEPRINT,
        "networkPolicy": NETWORK_POLICY,
        "networkPolicyManagement": Enum(("Managed", "Unmanaged")),
        "envVarsInjectionPolicy": Enum(("Allowed", "Overrides", "Disallowed")),
        "volumeClaimTemplatesPolicy": _POLICY,
    },
}
WARM_POOL = {
    "spec!": {
        "replicas": INT,
        "sandboxTemplateRef": {"name!": STR},
        "updateStrategy": {"type": Enum(("Recreate", "OnReplenish"))},
    },
    "status": {"replicas": INT, "readyReplicas": INT, "selector": STR, "observedGeneration": INT},
}
LOOSE = {"spec": ANY, "status": ANY}
# core/v1 Event: its fields sit beside metadata (no spec or status).
EVENT = {"involvedObject!": ANY, "reason": STR, "message": STR, "source": ANY, "type": STR,
         "firstTimestamp": ANY, "lastTimestamp": ANY, "count": INT, "eventTime": ANY,
         "series": ANY, "action": STR, "related": ANY, "reportingComponent": STR,
         "reportingInstance": STR}  # fmt: skip


def violations(doc: Any, schema: Any, path: str = "") -> tuple[list[str], list[str]]:
    """Check ``doc`` against ``schema``: (unknown fields, invalid values), each a list of
    messages naming the field by its dotted path. Both empty means the document is valid."""
    unknown: list[str] = []
    invalid: list[str] = []
    _check(doc, schema, path, unknown, invalid)
    return unknown, invalid


def _check(doc: Any, schema: Any, path: str, unknown: list[str], invalid: list[str]) -> None:
    if schema is ANY or doc is None:
        return
    if isinstance(schema, dict):
        if not isinstance(doc, dict):
            invalid.append(f"{path}: Invalid value: must be an object")
            return
        fields = {k.rstrip("!"): v for k, v in schema.items()}
        for key in schema:
            if key.endswith("!") and doc.get(key[:-1]) in (None, ""):
                invalid.append(f"{path}.{key[:-1]}".lstrip(".") + ": Required value")
        for key, value in doc.items():
            sub = f"{path}.{key}".lstrip(".")
            if key not in fields:
                unknown.append(f'unknown field "{sub}"')
            else:
                _check(value, fields[key], sub, unknown, invalid)
    elif isinstance(schema, list):
        if not isinstance(doc, list):
            invalid.append(f"{path}: Invalid value: must be a list")
            return
        for i, item in enumerate(doc):
            _check(item, schema[0], f"{path}[{i}]", unknown, invalid)
    elif isinstance(schema, Enum):
        if doc not in schema.values:
            allowed = ", ".join(f'"{v}"' for v in schema.values)
            invalid.append(f'{path}: Unsupported value: "{doc}": supported values: {allowed}')
    elif isinstance(schema, _Scalar):
        ok = isinstance(doc, schema.types) and not (schema is INT and isinstance(doc, bool))
        if schema is MAP and ok:
            ok = all(isinstance(v, str) for v in doc.values())
        if not ok:
            invalid.append(f"{path}: Invalid value: must be of type {schema.name}")


@dataclass(frozen=True)
class Kind:
    """One served resource: where it lives, what it is called, what it allows."""

    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    schema: dict[str, Any] = field(default_factory=lambda: LOOSE)
    subresources: tuple[str, ...] = ()
    short_names: tuple[str, ...] = ()
    verbs: tuple[str, ...] = (
        "create", "delete", "deletecollection", "get", "list", "patch", "update", "watch",
    )  # fmt: skip

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def resource(self) -> str:
        """The store key: ``group/version/plural``."""
        return f"{self.api_version}/{self.plural}"


AGENTS = "agents.x-k8s.io"
EXTENSIONS = "extensions.agents.x-k8s.io"
V1B1 = "v1beta1"
NAMESPACES = Kind("", "v1", "namespaces", "Namespace", namespaced=False,
                  verbs=("create", "delete", "get", "list", "patch", "update", "watch"))  # fmt: skip
PODS = Kind("", "v1", "pods", "Pod", subresources=("status", "exec"), short_names=("po",))
SANDBOXES = Kind(AGENTS, V1B1, "sandboxes", "Sandbox", schema=SANDBOX,
                 subresources=("status",), short_names=("sandbox",))  # fmt: skip
CLAIMS = Kind(EXTENSIONS, V1B1, "sandboxclaims", "SandboxClaim", schema=CLAIM,
              subresources=("status",), short_names=("sandboxclaim",))  # fmt: skip
TEMPLATES = Kind(EXTENSIONS, V1B1, "sandboxtemplates", "SandboxTemplate", schema=TEMPLATE,
                 short_names=("sandboxtemplate",))  # fmt: skip
WARM_POOLS = Kind(EXTENSIONS, V1B1, "sandboxwarmpools", "SandboxWarmPool", schema=WARM_POOL,
                  subresources=("status", "scale"), short_names=("swp",))  # fmt: skip
EVENTS = Kind("", "v1", "events", "Event", schema=EVENT, short_names=("ev",))
# authorization.k8s.io/v1: answered, never stored (spec.resourceAttributes as the client sends it)
ACCESS_REVIEWS = Kind("authorization.k8s.io", "v1", "selfsubjectaccessreviews",
                      "SelfSubjectAccessReview", namespaced=False,
                      schema={"spec!": {"resourceAttributes": ANY, "nonResourceAttributes": ANY},
                              "status": ANY}, verbs=("create",))  # fmt: skip
ALL: tuple[Kind, ...] = (NAMESPACES, PODS, EVENTS, SANDBOXES, CLAIMS, TEMPLATES, WARM_POOLS,
                         ACCESS_REVIEWS)  # fmt: skip
AGENT_SANDBOX_GROUPS = (AGENTS, EXTENSIONS)


def find(group: str, version: str, plural: str) -> Kind | None:
    """The kind served at ``group/version/plural``, or None."""
    for kind in ALL:
        if (kind.group, kind.version, kind.plural) == (group, version, plural):
            return kind
    return None


def discovery(group: str, version: str, hidden: tuple[str, ...] = ()) -> dict[str, Any] | None:
    """The ``APIResourceList`` of ``group/version`` (core group ``""``), or None (also for a
    group in ``hidden``)."""
    kinds = [k for k in ALL if (k.group, k.version) == (group, version) and group not in hidden]
    if not kinds:
        return None
    resources: list[dict[str, Any]] = []
    for k in kinds:
        resources.append({"name": k.plural, "singularName": k.kind.lower(), "namespaced":
                          k.namespaced, "kind": k.kind, "verbs": list(k.verbs),
                          "shortNames": list(k.short_names)})  # fmt: skip
        for sub in k.subresources:
            sub_kind = {"scale": "Scale"}.get(sub, k.kind)
            verbs = ["create", "get"] if sub == "exec" else ["get", "patch", "update"]
            entry = {"name": f"{k.plural}/{sub}", "singularName": "", "namespaced":
                     k.namespaced, "kind": sub_kind, "verbs": verbs}  # fmt: skip
            if sub == "scale":
                entry.update(group="autoscaling", version="v1")
            resources.append(entry)
    group_version = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
            "resources": resources}  # fmt: skip


def groups(hidden: tuple[str, ...] = ()) -> dict[str, Any]:
    """The ``APIGroupList`` of ``/apis`` (the named groups but those in ``hidden``)."""
    names = sorted({(k.group, k.version) for k in ALL if k.group and k.group not in hidden})
    out = []
    for name, served in names:
        version = {"groupVersion": f"{name}/{served}", "version": served}
        out.append({"name": name, "versions": [version], "preferredVersion": version})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": out}
