"""Doctor's checks of the cluster ``HANGAR_SANDBOXES=gke://CONTEXT/NAMESPACE`` names, in order
(each failing one names its fix; the later ones are skipped when the cluster does not answer):

1. the API server answers (``/version``), through HANGAR_GKE_ENDPOINT or the kubeconfig context;
2. the Agent Sandbox kinds are served (discovery of ``agents.x-k8s.io/v1beta1`` ``sandboxes``
   and ``extensions.agents.x-k8s.io/v1beta1`` ``sandboxtemplates``, ``sandboxwarmpools``,
   ``sandboxclaims``);
3. hangar's identity may do what the backend does in the namespace, one SelfSubjectAccessReview
   per verb and resource (:data:`NEEDED`): the four kinds created, read, listed, watched,
   patched, deleted; pods read, listed, watched; ``pods/exec`` created; events listed and
   watched;
4. each environment ``HANGAR_PREBUILD_ENVIRONMENTS`` names (``all``: every pool hangar made)
   has its warm pool, with as many ready sandboxes as it asks for.

Each request is bounded by the probe timeout. The ``kubernetes`` client is imported only here.
"""

from __future__ import annotations

from typing import Any, cast

from hangar.cli.doctor.report import ProbeTimeout, Report, describe, within
from hangar.config import Settings
from hangar.errors import InvalidSettings
from hangar.sandboxes.gke import manifests as objects
from hangar.sandboxes.gke.config import configuration, parse_url

KINDS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (objects.AGENTS_GROUP, objects.VERSION, (objects.SANDBOXES,)),
    (
        objects.EXTENSIONS_GROUP,
        objects.VERSION,
        (objects.TEMPLATES, objects.POOLS, objects.CLAIMS),
    ),
)
"""The Agent Sandbox kinds the backend uses: (group, version, plurals)."""

_OBJECT_VERBS = ("create", "get", "list", "watch", "patch", "delete")
NEEDED: tuple[tuple[str, str, str], ...] = (
    *((group, plural, verb) for group, _, plurals in KINDS for plural in plurals
      for verb in _OBJECT_VERBS),
    *(("", "pods", verb) for verb in ("get", "list", "watch")),
    ("", "pods/exec", "create"),
    *(("", "events", verb) for verb in ("list", "watch")),
)  # fmt: skip
"""(API group, resource, verb) the backend needs in its namespace."""

INSTALL = ("install the Agent Sandbox on the cluster (gcloud container clusters update CLUSTER "
           "--enable-agent-sandbox, or Terraform's agent_sandbox_config in terraform/modules/gke)")  # fmt: skip


def cluster(report: Report, settings: Settings, seconds: float) -> None:
    """Run the module's checks for ``settings.sandboxes`` (a ``gke://`` URL), one line each."""
    context, namespace, _ = parse_url(settings.sandboxes)
    where = ("HANGAR_GKE_ENDPOINT " + settings.gke_endpoint if settings.gke_endpoint
             else f"kubeconfig context {context}")  # fmt: skip
    try:
        cfg = configuration(context, settings)
    except InvalidSettings as exc:
        report.line("FAIL", f"cluster ({where}): {exc.message}")
        return
    from kubernetes import client

    api = client.ApiClient(cfg)
    version = _probe(report, f"cluster at {cfg.host} ({where})", seconds,
                     lambda: client.VersionApi(api).get_code(_request_timeout=seconds),
                     "check the endpoint or context, its credentials, and that this machine "
                     "reaches the API server (authorized networks, or the VPC of a private "
                     "endpoint)")  # fmt: skip
    if version is None:
        return
    report.line(
        "OK", f"cluster at {cfg.host} answers (Kubernetes {version.git_version})"
    )
    if not _kinds(report, api, seconds):
        return
    _access(report, api, namespace, seconds)
    _prebuilt(report, api, namespace, settings, seconds)


def _prebuilt(report: Report, api: Any, namespace: str, settings: Settings,
              seconds: float) -> None:  # fmt: skip
    """One line per prebuilt environment's pool: there, and all its sandboxes ready."""
    from kubernetes import client

    names = settings.prebuilt
    if names is not None and not names:
        return
    custom = client.CustomObjectsApi(api)
    if names is None:  # all
        found = _probe(report, "warm pools", seconds, lambda: custom.list_namespaced_custom_object(
            objects.EXTENSIONS_GROUP, objects.VERSION, namespace, objects.POOLS,
            label_selector=f"{objects.MANAGED_BY}=hangar", _request_timeout=seconds),
            "check the access above")  # fmt: skip
        if found is None:
            return
        pools = {str((p.get("metadata") or {}).get("name")): p for p in found.get("items") or []}
        report.check(bool(pools), "warm pools of the prebuilt environments (all)",
                     "no warm pool is made yet (HANGAR_PREBUILD_ENVIRONMENTS=all): hangar serve "
                     "makes them at start, the reaper's pass within a minute", "WARN")  # fmt: skip
        for name, pool in sorted(pools.items()):
            _pool_ready(report, name, name, pool, namespace)
        return
    for env in sorted(names):
        name = objects.pool_name(env)
        def read(name: str = name) -> dict[str, Any]:
            return cast(dict[str, Any], custom.get_namespaced_custom_object(
                objects.EXTENSIONS_GROUP, objects.VERSION, namespace, objects.POOLS, name,
                _request_timeout=seconds))  # fmt: skip

        try:
            pool = within(seconds, read)
        except client.ApiException as exc:
            if exc.status != 404:
                report.line("FAIL", f"environment {env}'s warm pool {name}: HTTP {exc.status}")
                continue
            report.line("FAIL", f"environment {env}'s warm pool {name} is not made: hangar "
                        "serve makes it at start, and the reaper's pass within a minute; if "
                        "it stays missing, check the environment has an image (hangar env get "
                        f"{env})")  # fmt: skip
            continue
        except ProbeTimeout as exc:
            report.line("FAIL", f"environment {env}'s warm pool {name}: {exc}")
            continue
        _pool_ready(report, f"environment {env}'s", name, pool, namespace)


def _pool_ready(report: Report, whose: str, name: str, pool: dict[str, Any],
                namespace: str) -> None:  # fmt: skip
    wanted = int((pool.get("spec") or {}).get("replicas") or 0)
    ready = int((pool.get("status") or {}).get("readyReplicas") or 0)
    label = f"{whose} warm pool {name}" if whose != name else f"warm pool {name}"
    report.check(ready >= wanted, f"{label}: {ready} of {wanted} sandboxes ready",
                 f"{label}: {ready} of {wanted} sandboxes ready: its pods wait (kubectl get "
                 f"events -n {namespace} says why: nodes, a quota, the image); a start "
                 "meanwhile is a cold one")  # fmt: skip


def _kinds(report: Report, api: Any, seconds: float) -> bool:
    missing: list[str] = []
    for group, version, plurals in KINDS:
        found = _served(api, group, version, seconds)
        if found is None:
            report.line(
                "FAIL",
                f"Agent Sandbox kinds: cannot read the discovery of {group}/{version}",
            )
            return False
        missing += [f"{group}/{version} {p}" for p in plurals if p not in found]
    return report.check(not missing, "the Agent Sandbox kinds are served (sandboxes, "
                        "sandboxtemplates, sandboxwarmpools, sandboxclaims)",
                        f"the Agent Sandbox kinds are missing ({', '.join(missing)}): {INSTALL}")  # fmt: skip


def _served(api: Any, group: str, version: str, seconds: float) -> set[str] | None:
    """The resources ``group/version`` serves (empty when the group is not served at all), or
    None when discovery fails otherwise."""
    from kubernetes import client

    try:
        found = within(seconds, lambda: client.CustomObjectsApi(api).get_api_resources(
            group, version, _request_timeout=seconds))  # fmt: skip
    except client.ApiException as exc:
        return set() if exc.status == 404 else None
    except ProbeTimeout:
        return None
    return {r.name for r in (found.resources if found else [])}


def _access(report: Report, api: Any, namespace: str, seconds: float) -> None:
    from kubernetes import client

    auth = client.AuthorizationV1Api(api)
    denied: list[str] = []
    for group, resource, verb in NEEDED:
        plural, _, sub = resource.partition("/")
        attrs = {"namespace": namespace, "verb": verb, "group": group, "resource": plural,
                 **({"subresource": sub} if sub else {})}  # fmt: skip
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": attrs}}  # fmt: skip
        answer = _probe(report, f"access review ({verb} {resource})", seconds,
                        lambda body=body: auth.create_self_subject_access_review(
                            body, _request_timeout=seconds),
                        "the identity must be allowed to create selfsubjectaccessreviews "
                        "(every authenticated user is, by default)")  # fmt: skip
        if answer is None:
            return
        if not answer.status.allowed:
            denied.append(f"{verb} {group + '/' if group else ''}{resource}")
    report.check(not denied, f"hangar may use the Agent Sandbox kinds, pods, pods/exec and events "
                 f"in namespace {namespace} ({len(NEEDED)} access reviews)",
                 f"hangar may not, in namespace {namespace}: {', '.join(denied)}: grant them "
                 "with a Role bound to hangar's identity (Terraform's terraform/modules/"
                 "cluster_access makes it)")  # fmt: skip


def _probe(report: Report, label: str, seconds: float, run: Any, fix: str) -> Any:
    """``run()`` within ``seconds``, or a FAIL line ``label: WHY: fix`` and None."""
    from hangar.sandboxes.gke.errors import vendor_errors

    try:
        return within(seconds, run)
    except ProbeTimeout as exc:
        report.line("FAIL", f"{label}: {exc}: {fix}")
    except vendor_errors() as exc:
        status = getattr(exc, "status", None)  # an ApiException: its HTTP answer
        why = (
            f"HTTP {status} {getattr(exc, 'reason', '')}".rstrip()
            if status
            else describe(exc)
        )
        report.line("FAIL", f"{label}: {why}: {fix}")
    return None
