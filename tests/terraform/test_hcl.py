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


@pytest.mark.parametrize("directory", CONFIG_DIRS, ids=_ids(CONFIG_DIRS))
def test_google_provider_is_pinned_to_6(directory: Path) -> None:
    terraform_blocks = _parse(directory / "versions.tf")["terraform"]
    providers = terraform_blocks[0]["required_providers"][0]
    assert providers["google"]["source"] == "hashicorp/google"
    assert providers["google"]["version"] == "~> 6.0"


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
        (body["collection"], tuple((f["field_path"], f["order"]) for f in body["fields"]))
        for rtype, _, body in _resources(MODULES / "firestore")
        if rtype == "google_firestore_index"
    }
    asc, desc = "ASCENDING", "DESCENDING"
    needed = {
        # equality fields, then order-by fields, then range fields (db/firestore.py)
        ("sessions", (("state", asc), ("created_at", desc))),  # by state, newest first
        ("sessions", (("created_at", desc), ("name", desc))),  # by name prefix
        ("sessions", (("state", asc), ("created_at", desc), ("name", desc))),  # both
        ("turns", (("session_id", asc), ("n", asc))),
        ("checkpoints", (("session_id", asc), ("ts", asc))),
    }
    assert needed <= declared, sorted(needed - declared)
