"""The doctor's checks of the deployed functions, read through the Cloud Run Admin API v2.

Terraform (``terraform/modules/functions``) deploys two Cloud Run functions, ``PREFIX-api`` and
``PREFIX-ticks``; Cloud Functions gen2 runs each as a Cloud Run service of the same name. Where
they are: ``HANGAR_PROJECT`` and ``HANGAR_REGION`` when set, else read from the cloud URLs
(``cloudtasks://projects/P/locations/L/...`` and ``gcpkms://projects/P/locations/L/...`` give
both, ``firestore://P/DB`` the project; ``GOOGLE_CLOUD_PROJECT`` last); the prefix is
``HANGAR_FUNCTIONS_PREFIX`` (Terraform's ``name_prefix``). When that is unset and no function
has the default prefix, the one prefix with both functions in the region is taken.

Checked: both exist and are ready (their URLs are printed); the api's ``HANGAR_TICKS_URL`` is
the ticks service's URL; both have the same ``HANGAR_DB``, ``HANGAR_SESSION_STORE``,
``HANGAR_KEYS`` and ``HANGAR_TICKS``, and those are cloud backends (an instance's disk is
neither shared nor kept); the ticks service is not public and the api is (hangar checks bearer
tokens itself). A public ticks service is a WARN, not a FAIL: ticks are hints, and a forged one
costs one state read and changes nothing (BRIEF invariant 8), but it departs from Terraform and
lets anyone make the control plane work.

With ``HANGAR_RUN_ENDPOINT`` the client talks REST to that endpoint without credentials (the
stand-in in ``emulators/cloudrun``); otherwise to the real service with the default credentials.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hangar.cli.client import base_url
from hangar.cli.doctor.backends import TASKS_QUEUE
from hangar.cli.doctor.report import (
    ProbeTimeout,
    Report,
    describe,
    fetch,
    shown,
    vendor_errors,
    within,
)
from hangar.config import Settings

if TYPE_CHECKING:
    from google.cloud.run_v2 import Service, ServicesClient

SHARED = ("HANGAR_DB", "HANGAR_SESSION_STORE", "HANGAR_KEYS", "HANGAR_TICKS")
"""The backend settings both functions must share, with the scheme each needs in the cloud."""
CLOUD_SCHEMES = {
    "HANGAR_DB": "firestore://",
    "HANGAR_SESSION_STORE": "gs://",
    "HANGAR_KEYS": "gcpkms://",
    "HANGAR_TICKS": "cloudtasks://",
}
_KMS_KEY = re.compile(r"^gcpkms://projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)/")
_FIRESTORE = re.compile(r"^firestore://(?P<project>[^/]+)")
_REGION = re.compile(r"^[a-z]+(?:-[a-z]+)+[0-9]+$")
_PUBLIC = frozenset({"allUsers", "allAuthenticatedUsers"})
_INVOKER = "roles/run.invoker"
_OPEN_INGRESS = ("INGRESS_TRAFFIC_ALL", "INGRESS_TRAFFIC_UNSPECIFIED")


def uses_cloud(settings: Settings) -> bool:
    """Whether the settings name any cloud backend or say where the functions are."""
    urls = (settings.db, settings.session_store, settings.keys, settings.ticks,
            settings.sandboxes)  # fmt: skip
    cloud = ("firestore:", "gs:", "gcpkms:", "cloudtasks:", "gke:")
    return any(url.startswith(cloud) for url in urls) or bool(
        settings.project or settings.region or settings.run_endpoint
    )


@dataclass(frozen=True)
class Place:
    project: str | None
    region: str | None


def locate(report: Report, settings: Settings, env: Mapping[str, str]) -> Place:
    """Where the functions should be: the explicit settings first, then what the cloud URLs say
    (a WARN when they name different projects or regions)."""
    projects: list[tuple[str, str]] = []
    regions: list[tuple[str, str]] = []
    if match := TASKS_QUEUE.match(settings.ticks):
        projects.append(("HANGAR_TICKS", match["project"]))
        regions.append(("HANGAR_TICKS", match["location"]))
    if match := _KMS_KEY.match(settings.keys):
        projects.append(("HANGAR_KEYS", match["project"]))
        if _REGION.match(match["location"]):  # not "global" nor a multi-region
            regions.append(("HANGAR_KEYS", match["location"]))
    if match := _FIRESTORE.match(settings.db):
        projects.append(("HANGAR_DB", match["project"]))
    if env.get("GOOGLE_CLOUD_PROJECT"):
        projects.append(("GOOGLE_CLOUD_PROJECT", env["GOOGLE_CLOUD_PROJECT"]))
    project = settings.project or _agreed(report, "project", "HANGAR_PROJECT", projects)
    region = settings.region or _agreed(report, "region", "HANGAR_REGION", regions)
    return Place(project, region)


def _agreed(report: Report, what: str, setting: str, found: list[tuple[str, str]]) -> str | None:
    if len({value for _, value in found}) > 1:
        named = ", ".join(f"{value} ({source})" for source, value in found)
        report.line("WARN", f"the settings name different {what}s: {named}; looking for the "
                    f"functions in {found[0][1]} (set {setting} to choose)")  # fmt: skip
    return found[0][1] if found else None


def check_functions(
    report: Report, settings: Settings, env: Mapping[str, str], seconds: float
) -> None:
    """Find the api and ticks functions and check how they are deployed."""
    if not uses_cloud(settings):
        report.line("INFO", "functions: not checked (embedded settings: no cloud backend named)")
        return
    place = locate(report, settings, env)
    if not place.project or not place.region:
        missing = " and ".join(name for name, value in (("HANGAR_PROJECT", place.project),
                               ("HANGAR_REGION", place.region)) if not value)  # fmt: skip
        report.line("INFO", f"functions: not checked: set {missing} (or use cloud URLs that "
                    "name them) to check the deployed functions")  # fmt: skip
        return
    parent = f"projects/{place.project}/locations/{place.region}"
    where = f"Cloud Run {parent}"
    if settings.run_endpoint:
        where += f" at HANGAR_RUN_ENDPOINT {settings.run_endpoint}"
    label = f"functions ({where})"
    found = fetch(report, label, seconds, lambda: _list_services(settings, parent, seconds))
    if found is None:
        return
    client, services = found
    by_name = {service.name: service for service in services}
    prefix = settings.functions_prefix
    if not env.get("HANGAR_FUNCTIONS_PREFIX"):
        prefix = _guess_prefix(report, prefix, [_short(s) for s in services])
    api = by_name.get(f"{parent}/services/{prefix}-api")
    ticks = by_name.get(f"{parent}/services/{prefix}-ticks")
    if api is None and ticks is None:
        others = ", ".join(sorted(n.rsplit("/", 1)[-1] for n in by_name)[:10]) or "none"
        report.line("WARN", f"{label}: no {prefix}-api or {prefix}-ticks (services there: "
                    f"{others}): fine if hangar serve is the control plane; else check "
                    "HANGAR_FUNCTIONS_PREFIX and HANGAR_REGION")  # fmt: skip
        return
    roles = {"api": "the REST API", "ticks": "where Cloud Tasks posts ticks"}
    for short, service, role in ((f"{prefix}-api", api, roles["api"]),
                                 (f"{prefix}-ticks", ticks, roles["ticks"])):  # fmt: skip
        if service is None:
            report.line("FAIL", f"function {short}: not found in {where} ({role}): deploy it "
                        "(terraform apply)")  # fmt: skip
        else:
            _ready(report, short, service)
    if api is not None and ticks is not None:
        _environment(report, env, api, ticks)
    exposure = Exposure(report, client, seconds)
    if ticks is not None:
        exposure.ticks(ticks)
    if api is not None:
        exposure.api(api)
        urls = _urls(api)
        if urls and base_url(settings.url) not in urls:
            report.line("INFO", f"the CLI talks to HANGAR_URL {settings.url}, not to "
                        f"{_short(api)} (set HANGAR_URL={api.uri} to use the "
                        "functions)")  # fmt: skip


def _guess_prefix(report: Report, default: str, names: list[str]) -> str:
    """The default prefix if a function has it; else the one prefix that has both functions
    there (Terraform's dev environment uses ``hangar-dev``), said in an INFO line."""
    if f"{default}-api" in names or f"{default}-ticks" in names:
        return default
    pairs = sorted(n[: -len("-api")] for n in names
                   if n.endswith("-api") and n[: -len("-api")] + "-ticks" in names)  # fmt: skip
    if len(pairs) != 1:
        return default
    report.line("INFO", f"functions: found {pairs[0]}-api and {pairs[0]}-ticks (set "
                f"HANGAR_FUNCTIONS_PREFIX={pairs[0]} to say so)")  # fmt: skip
    return pairs[0]


def _client(settings: Settings) -> ServicesClient:
    from google.cloud import run_v2

    if settings.run_endpoint:
        from google.api_core.client_options import ClientOptions
        from google.auth.credentials import AnonymousCredentials

        return run_v2.ServicesClient(
            credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
            transport="rest",
            client_options=ClientOptions(api_endpoint=settings.run_endpoint),
        )
    return run_v2.ServicesClient(transport="rest")


def _list_services(
    settings: Settings, parent: str, seconds: float
) -> tuple[ServicesClient, list[Service]]:
    client = _client(settings)
    pages = client.list_services(request={"parent": parent}, retry=None, timeout=seconds)
    return client, list(pages)


def _short(service: Service) -> str:
    return str(service.name).rsplit("/", 1)[-1]


def _urls(service: Service) -> list[str]:
    return [str(url).rstrip("/") for url in (service.uri, *service.urls) if url]


def _ready(report: Report, short: str, service: Service) -> None:
    from google.cloud.run_v2 import Condition

    condition = service.terminal_condition
    if condition.type_ != "Ready":
        condition = next((c for c in service.conditions if c.type_ == "Ready"), condition)
    state = Condition.State(condition.state).name
    if state == "CONDITION_SUCCEEDED":
        report.line("OK", f"function {short}: ready at {service.uri or '(no URL)'}")
    else:
        why = condition.message or "no Ready condition"
        report.line("FAIL", f"function {short}: not ready ({state}): {why}")


def _env(service: Service) -> dict[str, str]:
    """The service's environment (first container first); a value from Secret Manager shows as
    ``<secret NAME>``, never its value."""
    values: dict[str, str] = {}
    for container in service.template.containers:
        for var in container.env:
            if var.name in values:
                continue
            ref = var.value_source.secret_key_ref
            values[var.name] = f"<secret {ref.secret}>" if ref.secret else var.value
    return values


def _environment(report: Report, env: Mapping[str, str], api: Service, ticks: Service) -> None:
    api_name, ticks_name = _short(api), _short(ticks)
    api_env, ticks_env = _env(api), _env(ticks)
    target = api_env.get("HANGAR_TICKS_URL", "")
    if not target:
        report.line("FAIL", f"function {api_name} has no HANGAR_TICKS_URL: Cloud Tasks has "
                    f"nowhere to post ticks (Terraform sets it to {ticks.uri})")  # fmt: skip
    elif target.rstrip("/") not in _urls(ticks):
        report.line("FAIL", f"function {api_name} has HANGAR_TICKS_URL {shown(target)}, not "
                    f"{ticks_name}'s URL {ticks.uri}: ticks go elsewhere")  # fmt: skip
    else:
        report.line("OK", f"function {api_name} posts ticks to {ticks_name} (HANGAR_TICKS_URL)")
    differ = [name for name in SHARED if api_env.get(name) != ticks_env.get(name)]
    for name in differ:
        report.line("FAIL", f"{name} differs between the functions: {api_name} has "
                    f"{_value(api_env, name)}, {ticks_name} has {_value(ticks_env, name)}: "
                    "one control plane needs one set of backends")  # fmt: skip
    embedded = [n for n in SHARED if n not in differ and
                not api_env.get(n, "").startswith(CLOUD_SCHEMES[n])]  # fmt: skip
    for name in embedded:
        report.line("FAIL", f"{name} of the functions is {_value(api_env, name)}: a Cloud Run "
                    "instance's disk is neither shared nor kept; use "
                    f"{CLOUD_SCHEMES[name]}...")  # fmt: skip
    if not differ and not embedded:
        report.line("OK", f"functions {api_name} and {ticks_name} share the cloud backends "
                    f"({', '.join(SHARED)})")  # fmt: skip
    for name in SHARED:
        here, there = env.get(name), api_env.get(name)
        if here and there and here != there:
            report.line("WARN", f"{name} here is {shown(here)} but the functions use "
                        f"{shown(there)}: the backend checks above were of "
                        f"{shown(here)}")  # fmt: skip
    if api_env.get("HANGAR_TICKS", "").startswith("cloudtasks:") and not api_env.get(
        "HANGAR_TASKS_INVOKER"
    ):
        report.line("WARN", f"function {api_name} has no HANGAR_TASKS_INVOKER: its ticks carry "
                    f"no OIDC token, and the private {ticks_name} refuses them")  # fmt: skip


def _value(values: Mapping[str, str], name: str) -> str:
    value = values.get(name)
    return shown(value) if value else "unset (the embedded default)"


@dataclass
class Exposure:
    """Who may call a service: the invoker IAM check and its ``roles/run.invoker`` members, and
    the ingress setting."""

    report: Report
    client: ServicesClient
    seconds: float

    def _public(self, service: Service) -> tuple[bool | None, str]:
        """(unauthenticated calls allowed, why); None when the policy could not be read."""
        if service.invoker_iam_disabled:
            return True, "the invoker IAM check is off (invokerIamDisabled)"
        request = {"resource": service.name}

        def read() -> Any:  # google.iam.v1.policy_pb2.Policy (untyped)
            return self.client.get_iam_policy(request=request, retry=None, timeout=self.seconds)

        try:
            policy = within(self.seconds, read)
        except ProbeTimeout as exc:
            return None, f"cannot read its IAM policy: {exc}"
        except vendor_errors() as exc:
            return None, f"cannot read its IAM policy: {describe(exc)}"
        members = {m for b in policy.bindings if b.role == _INVOKER for m in b.members}
        public = sorted(members & _PUBLIC)
        if public:
            return True, f"{_INVOKER} is granted to {', '.join(public)}"
        count = f"{len(members)} member" + ("" if len(members) == 1 else "s")
        return False, f"{_INVOKER} has {count}, none public"

    def ticks(self, service: Service) -> None:
        from google.cloud.run_v2 import IngressTraffic

        name = _short(service)
        ingress = IngressTraffic(service.ingress).name
        public, why = self._public(service)
        if public is None:
            self.report.line("WARN", f"function {name}: {why}")
        elif public:
            reach = "anyone" if ingress in _OPEN_INGRESS else f"anyone reaching it ({ingress})"
            self.report.line("WARN", f"function {name} is public: {why}, so {reach} can post "
                             "ticks (a forged tick costs a state read and changes nothing, but "
                             "Terraform grants only the tasks service account)")  # fmt: skip
        else:
            self.report.line("OK", f"function {name} is private: {why}")

    def api(self, service: Service) -> None:
        from google.cloud.run_v2 import IngressTraffic

        name = _short(service)
        ingress = IngressTraffic(service.ingress).name
        public, why = self._public(service)
        if public is None:
            self.report.line("WARN", f"function {name}: {why}")
        elif not public:
            self.report.line("WARN", f"function {name} is not public ({why}): Cloud Run refuses "
                             "calls without a Google identity token before hangar sees the "
                             "bearer token (Terraform grants allUsers)")  # fmt: skip
        elif ingress not in _OPEN_INGRESS:
            self.report.line("WARN", f"function {name} takes only {ingress} traffic: the CLI "
                             "reaches it only from inside the network")  # fmt: skip
        else:
            self.report.line("OK", f"function {name} is public (hangar checks bearer tokens)")
