"""Static checks of the Terraform in terraform/: parsed with python-hcl2, no provider needed.

Terraform providers cannot be downloaded on these machines, so ``terraform validate`` cannot run;
these tests check what a reviewer would: every file parses, every variable is declared with a
type and a description, module calls match the modules, and the IAM grants are the
least-privilege ones the deployment promises.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest

try:
    import hcl2
except ImportError as exc:  # pragma: no cover - exercised only on a broken install
    raise ImportError(
        "python-hcl2 is missing: install the test extras (`pip install -e '.[test]'`, "
        "which `make test` does) to check the Terraform"
    ) from exc

ROOT = Path(__file__).resolve().parents[2] / "terraform"
MODULES = ROOT / "modules"
DEV = ROOT / "environments" / "dev"
TF_FILES = sorted(ROOT.rglob("*.tf"))
MODULE_DIRS = sorted(p for p in MODULES.iterdir() if p.is_dir())
CONFIG_DIRS = [*MODULE_DIRS, DEV]

_VAR_REF = re.compile(r"\bvar\.([A-Za-z_][A-Za-z0-9_-]*)")
_SA_REF = re.compile(r"\bgoogle_service_account\.([A-Za-z_][A-Za-z0-9_-]*)\.email\b")
_META_KEYS = {"__is_block__", "__comments__", "__inline_comments__"}


def _name(key: str) -> str:
    """Block labels come quoted from python-hcl2 8 and bare from older releases."""
    return key[1:-1] if len(key) >= 2 and key[0] == key[-1] == '"' else key


def _clean(value: Any) -> Any:
    if isinstance(value, dict):
        return {_name(k): _clean(v) for k, v in value.items() if k not in _META_KEYS}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    if isinstance(value, str):
        return _name(value)
    return value


@cache
def _parse(path: Path) -> dict[str, Any]:
    with path.open() as f:
        return _clean(hcl2.load(f))  # type: ignore[no-any-return]


def _blocks(directory: Path, kind: str) -> dict[str, Any]:
    """All top-level blocks of one kind (variable, module, output) in a directory, by label."""
    found: dict[str, Any] = {}
    for path in sorted(directory.glob("*.tf")):
        for entry in _parse(path).get(kind, []):
            found.update(entry)
    return found


def _resources(directory: Path) -> list[tuple[str, str, dict[str, Any]]]:
    found = []
    for path in sorted(directory.glob("*.tf")):
        for entry in _parse(path).get("resource", []):
            for rtype, named in entry.items():
                for name, body in named.items():
                    found.append((rtype, name, body))
    return found


def _text(value: Any) -> str:
    return repr(value)


def _iam_members(body: dict[str, Any]) -> list[str]:
    members: list[str] = []
    if "member" in body:
        members.append(body["member"])
    members.extend(body.get("members", []))
    return members


def _ids(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(ROOT)) for p in paths]


def test_there_is_a_module_per_concern_and_a_dev_environment() -> None:
    names = {p.name for p in MODULE_DIRS}
    assert {"functions", "firestore", "tasks", "kms", "bucket", "gke"} <= names
    assert (DEV / "main.tf").is_file() and (DEV / "terraform.tfvars.example").is_file()


@pytest.mark.parametrize("path", TF_FILES, ids=_ids(TF_FILES))
def test_every_terraform_file_parses(path: Path) -> None:
    assert isinstance(_parse(path), dict), f"{path} did not parse"


@pytest.mark.parametrize("directory", CONFIG_DIRS, ids=_ids(CONFIG_DIRS))
def test_every_variable_has_a_description_and_a_type(directory: Path) -> None:
    variables = _blocks(directory, "variable")
    assert variables, f"{directory} declares no variables"
    for name, body in variables.items():
        assert str(body.get("description", "")).strip(), (
            f"{directory.name}: var.{name} has no description"
        )
        assert "type" in body, f"{directory.name}: var.{name} has no type"


@pytest.mark.parametrize("directory", CONFIG_DIRS, ids=_ids(CONFIG_DIRS))
def test_every_variable_reference_is_declared(directory: Path) -> None:
    declared = set(_blocks(directory, "variable"))
    for path in sorted(directory.glob("*.tf")):
        used = set(_VAR_REF.findall(path.read_text()))
        missing = used - declared
        assert not missing, (
            f"{path.relative_to(ROOT)} uses undeclared variables: {sorted(missing)}"
        )


GOOGLE_PIN = "~> 7.39"
"""hashicorp/google 7.39.0 is the first release with addons_config.agent_sandbox_config in GA
(its CHANGELOG); sandbox_config (7.22.0) and Direct VPC egress on Cloud Run functions (7.10.0)
came before it. Every configuration pins the same, or terraform init finds no version."""
KUBERNETES_PIN = "~> 3.2"


@pytest.mark.parametrize("directory", CONFIG_DIRS, ids=_ids(CONFIG_DIRS))
def test_every_configuration_pins_the_google_provider_that_has_the_agent_sandbox_addon(
    directory: Path,
) -> None:
    terraform_blocks = _parse(directory / "versions.tf")["terraform"]
    providers = terraform_blocks[0]["required_providers"][0]
    assert providers["google"]["source"] == "hashicorp/google"
    assert providers["google"]["version"] == GOOGLE_PIN
    if "kubernetes" in providers:
        assert providers["kubernetes"]["source"] == "hashicorp/kubernetes"
        assert providers["kubernetes"]["version"] == KUBERNETES_PIN


@pytest.mark.parametrize("directory", CONFIG_DIRS, ids=_ids(CONFIG_DIRS))
def test_a_configuration_with_kubernetes_resources_requires_the_kubernetes_provider(
    directory: Path,
) -> None:
    uses = any(t.startswith("kubernetes_") for t, _, _ in _resources(directory))
    providers = _parse(directory / "versions.tf")["terraform"][0]["required_providers"][
        0
    ]
    assert not uses or "kubernetes" in providers, f"{directory.name} uses kubernetes_*"


def test_every_module_call_passes_only_declared_and_all_required_variables() -> None:
    calls = _blocks(DEV, "module")
    assert calls, "environments/dev calls no modules"
    meta = {"source", "version", "depends_on", "providers", "count", "for_each"}
    for call, body in calls.items():
        target = (DEV / body["source"]).resolve()
        assert target.is_dir(), f"module {call}: {body['source']} does not exist"
        declared = _blocks(target, "variable")
        passed = set(body) - meta
        unknown = passed - set(declared)
        assert not unknown, (
            f"module {call} passes variables {target.name} does not declare: {sorted(unknown)}"
        )
        required = {name for name, var in declared.items() if "default" not in var}
        missing = required - passed
        assert not missing, (
            f"module {call} leaves required variables unset: {sorted(missing)}"
        )


@pytest.mark.parametrize("directory", CONFIG_DIRS, ids=_ids(CONFIG_DIRS))
def test_every_service_account_in_iam_exists_or_is_passed_in(directory: Path) -> None:
    accounts = {
        name
        for rtype, name, _ in _resources(directory)
        if rtype == "google_service_account"
    }
    variables = set(_blocks(directory, "variable"))
    for rtype, name, body in _resources(directory):
        if "_iam_" not in rtype:
            continue
        for member in _iam_members(body):
            if not member.startswith("serviceAccount:"):
                continue
            where = f"{directory.name}: {rtype}.{name}"
            sas = set(_SA_REF.findall(member))
            assert sas <= accounts, (
                f"{where} grants to service accounts not declared here: {sorted(sas - accounts)}"
            )
            vars_used = set(_VAR_REF.findall(member))
            if "each." in member:
                source = _text(body.get("for_each", ""))
                sas |= set(_SA_REF.findall(source))
                vars_used |= set(_VAR_REF.findall(source))
            assert vars_used <= variables, (
                f"{where} uses undeclared variables {sorted(vars_used - variables)}"
            )
            assert sas or vars_used, f"{where} grants to a hard-coded account: {member}"


def _bucket() -> dict[str, Any]:
    [body] = [
        b for t, _, b in _resources(MODULES / "bucket") if t == "google_storage_bucket"
    ]
    return body


def test_the_bucket_has_no_retention_policy_and_no_versioning() -> None:
    bucket = _bucket()
    assert "retention_policy" not in bucket, (
        "a retention policy would block pruning checkpoints"
    )
    assert bucket["uniform_bucket_level_access"] is True
    assert bucket["versioning"][0]["enabled"] is False


def test_the_bucket_deletes_objects_only_when_session_retention_days_is_above_zero() -> (
    None
):
    bucket = _bucket()
    assert "lifecycle_rule" not in bucket, "the lifecycle rule must be a dynamic block"
    dynamic = [
        d["lifecycle_rule"] for d in bucket.get("dynamic", []) if "lifecycle_rule" in d
    ]
    assert len(dynamic) == 1, "expected one dynamic lifecycle_rule block"
    condition = re.sub(r"\s+", "", dynamic[0]["for_each"])
    assert "var.session_retention_days>0?" in condition, condition
    default = _blocks(MODULES / "bucket", "variable")["session_retention_days"][
        "default"
    ]
    assert default == 0


def test_only_the_control_plane_gets_object_access_to_the_bucket() -> None:
    grants = [
        b
        for t, _, b in _resources(MODULES / "bucket")
        if t.startswith("google_storage_bucket_iam")
    ]
    assert grants
    for grant in grants:
        assert grant["role"] == "roles/storage.objectAdmin"
        assert "var.control_plane_service_accounts" in grant["for_each"]


def test_the_ticks_function_is_invokable_only_by_the_tasks_service_account() -> None:
    resources = _resources(MODULES / "functions")
    invokers = [
        b
        for t, _, b in resources
        if t.startswith("google_cloud_run")
        and "_iam_" in t
        and "functions2_function.ticks." in b["name"]
    ]
    assert len(invokers) == 1, "expected exactly one IAM grant on the ticks service"
    [grant] = invokers
    assert grant["role"] == "roles/run.invoker"
    assert grant["member"] == "serviceAccount:${var.tasks_service_account_email}"
    assert not any(
        t.startswith("google_cloudfunctions2_function_iam") for t, _, _ in resources
    )


def test_the_api_function_gets_the_ticks_url_and_the_backend_settings() -> None:
    functions = {
        n: b
        for t, n, b in _resources(MODULES / "functions")
        if t == "google_cloudfunctions2_function"
    }
    assert set(functions) == {"api", "ticks"}
    api_env = _text(functions["api"]["service_config"][0]["environment_variables"])
    assert (
        "HANGAR_TICKS_URL" in api_env
        and "google_cloudfunctions2_function.ticks." in api_env
    )
    main = (MODULES / "functions" / "main.tf").read_text()
    for setting in (
        "HANGAR_DB",
        "HANGAR_SESSION_STORE",
        "HANGAR_KEYS",
        "HANGAR_TICKS ",
    ):
        assert setting in main, f"{setting} is not set on the functions"
    accounts = {
        n: b["service_config"][0]["service_account_email"] for n, b in functions.items()
    }
    assert accounts == {
        "api": "${google_service_account.api.email}",
        "ticks": "${google_service_account.ticks.email}",
    }


def test_the_sandbox_pool_speedups_are_opt_in() -> None:
    variables = _blocks(MODULES / "gke", "variable")
    assert variables["image_streaming"]["type"] == "bool"
    assert variables["image_streaming"]["default"] is False
    assert variables["sandbox_disk_gb"]["default"] is None


def test_the_dev_environment_outputs_the_bucket_and_both_urls() -> None:
    assert {"session_bucket", "api_url", "ticks_url"} <= set(_blocks(DEV, "output"))


def test_every_composite_index_the_firestore_backend_queries_need_is_declared() -> None:
    declared = {
        (
            body["collection"],
            tuple((f["field_path"], f["order"]) for f in body["fields"]),
        )
        for rtype, _, body in _resources(MODULES / "firestore")
        if rtype == "google_firestore_index"
    }
    asc, desc = "ASCENDING", "DESCENDING"
    needed = {
        # equality fields, then order-by fields, then range fields (db/firestore.py)
        ("sessions", (("state", asc), ("created_at", desc))),  # by state, newest first
        ("sessions", (("created_at", desc), ("name", desc))),  # by name prefix
        ("sessions", (("state", asc), ("created_at", desc), ("name", desc))),  # both
        ("sessions", (("state", asc), ("last_active_at", desc))),  # the same by activity
        ("sessions", (("last_active_at", desc), ("name", desc))),
        ("sessions", (("state", asc), ("last_active_at", desc), ("name", desc))),
        ("turns", (("session_id", asc), ("n", asc))),
        ("checkpoints", (("session_id", asc), ("ts", asc))),
    }
    assert needed <= declared, sorted(needed - declared)


# --- the sandbox cluster (issue 25 item 4) -----------------------------------------------------


def _by_name(directory: Path) -> dict[tuple[str, str], dict[str, Any]]:
    return {(t, n): b for t, n, b in _resources(directory)}


def _dynamic(body: dict[str, Any], name: str) -> dict[str, Any]:
    [found] = [d[name] for d in body.get("dynamic", []) if name in d]
    return found  # type: ignore[no-any-return]


def _squash(value: Any) -> str:
    return re.sub(r"\s+", "", _text(value))


def test_the_cluster_runs_the_agent_sandbox_addon_and_dataplane_v2() -> None:
    cluster = _by_name(MODULES / "gke")[("google_container_cluster", "sandboxes")]
    [addons] = cluster["addons_config"]
    assert addons["agent_sandbox_config"] == [{"enabled": True}]
    # Dataplane V2 enforces NetworkPolicy itself; the Calico block would be a second enforcer.
    assert cluster["datapath_provider"] == "ADVANCED_DATAPATH"
    assert "network_policy" not in cluster
    assert cluster["networking_mode"] == "VPC_NATIVE"


def test_the_sandbox_pool_runs_gvisor_with_its_opt_in_speedups() -> None:
    resources = _by_name(MODULES / "gke")
    [node] = resources[("google_container_node_pool", "sandboxes")]["node_config"]
    assert node["sandbox_config"] == [{"type": "GVISOR"}]
    assert node["image_type"] == "COS_CONTAINERD"
    assert node["disk_size_gb"] == "${var.sandbox_disk_gb}"
    assert node["workload_metadata_config"] == [{"mode": "GKE_METADATA"}]
    assert "gcfs_config" not in node, (
        "image streaming must stay opt-in (a dynamic block)"
    )
    streaming = _dynamic(node, "gcfs_config")
    assert (
        re.sub(r"\s+", "", streaming["for_each"]) == "${var.image_streaming?[true]:[]}"
    )
    # GKE Sandbox needs a pool without it for system pods.
    [system] = resources[("google_container_node_pool", "system")]["node_config"]
    assert "sandbox_config" not in system


def test_the_control_plane_endpoint_is_private_and_public_only_for_operator_networks() -> (
    None
):
    cluster = _by_name(MODULES / "gke")[("google_container_cluster", "sandboxes")]
    [private] = cluster["private_cluster_config"]
    assert private["enable_private_nodes"] is True
    assert private["enable_private_endpoint"] == "${local.private_endpoint_only}"
    [gke_locals] = _parse(MODULES / "gke" / "main.tf")["locals"]
    assert (
        _squash(gke_locals["private_endpoint_only"])
        == "'${length(var.operator_cidrs)==0}'"
    )
    authorized = _dynamic(cluster, "master_authorized_networks_config")
    assert authorized["content"][0]["gcp_public_cidrs_access_enabled"] is False
    assert _blocks(MODULES / "gke", "variable")["operator_cidrs"]["default"] == []
    # Private nodes reach the internet (model APIs, git hosts) through Cloud NAT.
    assert ("google_compute_router_nat", "nat") in _by_name(MODULES / "gke")


def test_the_nodes_read_images_only_from_the_named_artifact_registry_repositories() -> (
    None
):
    resources = _by_name(MODULES / "gke")
    project_roles = resources[("google_project_iam_member", "nodes")]["for_each"]
    assert "artifactregistry" not in _text(project_roles), (
        "no project-wide image reader"
    )
    grant = resources[("google_artifact_registry_repository_iam_member", "nodes")]
    assert grant["role"] == "roles/artifactregistry.reader"
    assert grant["member"] == "serviceAccount:${google_service_account.nodes.email}"
    assert "var.image_repositories" in grant["for_each"]
    for pool in ("system", "sandboxes"):
        [node] = resources[("google_container_node_pool", pool)]["node_config"]
        assert node["service_account"] == "${google_service_account.nodes.email}"


EXPECTED_RULES = [
    (["agents.x-k8s.io"], ["sandboxes"], ["get", "list", "watch"]),
    (["agents.x-k8s.io"], ["sandboxes/status"], ["get"]),
    (
        ["extensions.agents.x-k8s.io"],
        ["sandboxtemplates", "sandboxwarmpools", "sandboxclaims"],
        ["create", "get", "list", "watch", "patch", "delete"],
    ),
    (
        ["extensions.agents.x-k8s.io"],
        ["sandboxwarmpools/status", "sandboxclaims/status"],
        ["get"],
    ),
    (["extensions.agents.x-k8s.io"], ["sandboxwarmpools/scale"], ["get", "patch"]),
    ([""], ["pods"], ["get", "list", "watch"]),
    ([""], ["pods/exec"], ["create", "get"]),
    ([""], ["events"], ["get", "list", "watch"]),
]


def test_the_control_planes_role_is_exactly_the_agent_sandbox_kinds_pods_exec_and_events() -> (
    None
):
    access = _by_name(MODULES / "cluster_access")
    role = access[("kubernetes_role_v1", "control_plane")]
    rules = [(r["api_groups"], r["resources"], r["verbs"]) for r in role["rule"]]
    assert rules == EXPECTED_RULES
    assert role["metadata"][0]["namespace"] == "${local.namespace}"
    # A Role, never a ClusterRole: nothing outside the namespace.
    assert not any(t.startswith("kubernetes_cluster_role") for t, _ in access)


def test_the_role_is_bound_to_the_functions_google_service_accounts_as_users() -> None:
    access = _by_name(MODULES / "cluster_access")
    binding = access[("kubernetes_role_binding_v1", "control_plane")]
    assert binding["role_ref"] == [
        {
            "api_group": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "${kubernetes_role_v1.control_plane.metadata[0].name}",
        }
    ]
    subject = _dynamic(binding, "subject")
    assert subject["for_each"] == "${var.control_plane_service_accounts}"
    assert subject["content"] == [
        {
            "api_group": "rbac.authorization.k8s.io",
            "kind": "User",
            "name": "${subject.value}",
        }
    ]
    # IAM lets them authenticate to the cluster and nothing more (no Kubernetes object).
    viewer = access[("google_project_iam_member", "cluster_viewer")]
    assert viewer["role"] == "roles/container.clusterViewer"
    assert viewer["for_each"] == "${var.control_plane_service_accounts}"
    calls = _blocks(DEV, "module")
    assert (
        calls["cluster_access"]["control_plane_service_accounts"]
        == "${local.control_plane}"
    )


def test_the_namespace_baseline_policy_allows_no_ingress_and_only_dns_egress() -> None:
    access = _by_name(MODULES / "cluster_access")
    [spec] = access[("kubernetes_network_policy_v1", "baseline")]["spec"]
    assert spec["pod_selector"] == [{}], "every pod in the namespace"
    assert spec["policy_types"] == ["Ingress", "Egress"]
    assert "ingress" not in spec
    [egress] = spec["egress"]
    assert egress["ports"] == [
        {"protocol": "UDP", "port": "53"},
        {"protocol": "TCP", "port": "53"},
    ]
    assert "ip_block" not in _text(egress), (
        "no address range: never the metadata server"
    )
    peers = _dynamic(egress, "to")
    assert peers["for_each"] == "${var.dns_peers}"
    [peer] = peers["content"]
    assert peer["namespace_selector"] == [
        {"match_labels": {"kubernetes.io/metadata.name": "kube-system"}}
    ]
    defaults = _blocks(MODULES / "cluster_access", "variable")["dns_peers"]["default"]
    assert defaults == [{"k8s-app": "kube-dns"}, {"k8s-app": "node-local-dns"}]


def test_the_functions_get_the_cluster_endpoint_and_ca_pem_from_the_gke_outputs() -> None:
    [fn_locals] = _parse(MODULES / "functions" / "main.tf")["locals"]
    gke_env = _squash(fn_locals["gke_env"])
    assert "HANGAR_GKE_ENDPOINT=var.gke_endpoint" in gke_env
    assert "HANGAR_GKE_CA=var.gke_ca_certificate" in gke_env
    assert "HANGAR_SANDBOXES=var.sandboxes_url" in _squash(fn_locals["sandboxes_env"])
    assert _squash(fn_locals["common_env"]) == (
        "'${merge(var.extra_env,local.backend_env,local.gke_env,local.sandboxes_env)}'"
    )
    functions = _by_name(MODULES / "functions")
    for name in ("api", "ticks"):
        [config] = functions[("google_cloudfunctions2_function", name)][
            "service_config"
        ]
        assert "local.common_env" in _text(config["environment_variables"])
        assert "secret_volumes" not in _text(config)  # the CA is public: no secret holds it
    assert not [k for k in functions if k[0].startswith("google_secret_manager")]
    outputs = _blocks(MODULES / "gke", "output")
    assert "private_endpoint" in outputs["endpoint"]["value"]
    assert "cluster_ca_certificate" in outputs["ca_certificate"]["value"]
    call = _blocks(DEV, "module")["functions"]
    assert call["gke_access"] is True
    assert call["gke_endpoint"] == "${module.gke.endpoint}"
    assert call["gke_ca_certificate"] == "${module.gke.ca_certificate}"
    assert call["sandboxes_url"] == "${local.sandboxes_url}"


def test_hangar_sandboxes_is_built_from_the_namespace_and_image_variables() -> None:
    [dev_locals] = _parse(DEV / "main.tf")["locals"]
    url = _squash(dev_locals["sandboxes_url"])
    assert url.startswith("'gke://${local.cluster_name}/${var.sandbox_namespace}?"), url
    options = _squash(dev_locals["sandbox_options"])
    assert "image=${urlencode(var.sandbox_image)}" in options
    assert "runtime_class=gvisor" in options
    variables = _blocks(DEV, "variable")
    assert variables["sandbox_image"]["default"] is None
    assert (
        _blocks(DEV, "module")["cluster_access"]["namespace"]
        == "${var.sandbox_namespace}"
    )


def test_the_functions_reach_the_private_endpoint_through_direct_vpc_egress() -> None:
    functions = _by_name(MODULES / "functions")
    for name in ("api", "ticks"):
        [config] = functions[("google_cloudfunctions2_function", name)][
            "service_config"
        ]
        interface = _dynamic(config, "direct_vpc_network_interface")
        assert interface["content"] == [
            {"network": "${var.vpc_network}", "subnetwork": "${var.vpc_subnetwork}"}
        ]
        assert "VPC_EGRESS_PRIVATE_RANGES_ONLY" in config["direct_vpc_egress"]
        assert "vpc_connector" not in config
    call = _blocks(DEV, "module")
    assert (
        call["functions"]["vpc_network"] == call["gke"]["network"] == "${var.network}"
    )
    assert call["functions"]["vpc_subnetwork"] == call["gke"]["subnetwork"]


@pytest.mark.parametrize(
    "directory",
    [MODULES / "gke", MODULES / "cluster_access", MODULES / "functions", DEV],
    ids=["gke", "cluster_access", "functions", "dev"],
)
def test_the_sandbox_cluster_variables_are_typed_and_described_in_full_sentences(
    directory: Path,
) -> None:
    for name, body in _blocks(directory, "variable").items():
        description = str(body.get("description", ""))
        assert len(description) >= 20 and description.rstrip().endswith((".", ")")), (
            f"{directory.name}: var.{name}: {description!r}"
        )
        assert "type" in body


def test_each_function_may_sign_blobs_as_itself_and_nothing_more() -> None:
    resources = _resources(MODULES / "functions")
    [(role_name, role)] = [
        (n, b) for t, n, b in resources if t == "google_project_iam_custom_role"
    ]
    assert role["permissions"] == ["iam.serviceAccounts.signBlob"]
    grants = {
        n: b for t, n, b in resources if t == "google_service_account_iam_member"
    }
    assert len(grants) == 2
    granted = set()
    for name, grant in grants.items():
        [account] = _SA_REF.findall(grant["member"])
        assert grant["service_account_id"] == f"${{google_service_account.{account}.name}}", (
            f"{name}: {account} may sign only as itself"
        )
        assert grant["role"] == f"${{google_project_iam_custom_role.{role_name}.name}}"
        granted.add(account)
    assert granted == {"api", "ticks"}
    # Never project-wide (it would let a function sign as every account of the project).
    for directory in CONFIG_DIRS:
        for rtype, name, body in _resources(directory):
            if rtype.startswith("google_project_iam_") and "role" in body:
                assert "sign_blob" not in _text(body["role"]), f"{rtype}.{name}"
                assert body["role"] != "roles/iam.serviceAccountTokenCreator"


def test_each_function_signs_urls_as_its_own_account_through_the_iam_credentials_api() -> (
    None
):
    functions = {
        n: b
        for t, n, b in _resources(MODULES / "functions")
        if t == "google_cloudfunctions2_function"
    }
    for name, function in functions.items():
        env = _squash(function["service_config"][0]["environment_variables"])
        # Last in the merge: extra_env cannot name another account.
        assert env.startswith("'${merge(local.common_env,{"), env
        assert env.count("HANGAR_SIGNING_SERVICE_ACCOUNT") == 1, env
        assert f"HANGAR_SIGNING_SERVICE_ACCOUNT=google_service_account.{name}.email" in env, env
    apis = _by_name(DEV)[("google_project_service", "apis")]
    assert "iamcredentials.googleapis.com" in _text(apis["for_each"])


def test_the_sandbox_pods_reach_the_storage_endpoint_through_cloud_nat() -> None:
    # Direct checkpoints: a pod (private node, its address from the pods' secondary range)
    # uploads to storage.googleapis.com through the NAT, which must cover every range.
    gke = _by_name(MODULES / "gke")
    nat = gke[("google_compute_router_nat", "nat")]
    assert nat["source_subnetwork_ip_ranges_to_nat"] == "ALL_SUBNETWORKS_ALL_IP_RANGES"
    assert nat["router"] == "${google_compute_router.nat.name}"
