"""Settings: one frozen object, built once from a mapping.

Nothing in hangar reads ``os.environ`` except the entry points, which pass it to
:meth:`Settings.from_env`. Every field has the environment name ``HANGAR_<FIELD>`` (upper case);
the spec's own names are kept (``session_keep_checkpoints`` is
``HANGAR_SESSION_KEEP_CHECKPOINTS``). URLs left unset default to the embedded backends under
``data_dir``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator
from pydantic import model_validator

from hangar.errors import InvalidSettings

_PREFIX = "HANGAR_"


def _default_data_dir(env: Mapping[str, str]) -> Path:
    home = env.get("HOME") or str(Path.home())
    return Path(home) / ".hangar"


def _default_harness_dir(env: Mapping[str, str]) -> Path:
    home = env.get("HOME") or str(Path.home())
    return Path(home) / ".local" / "share" / "hangar" / "harnesses"


def _default_max_sandboxes(memory_mb: Any) -> int:
    """As many sandboxes as this machine's memory holds at the agent's memory limit (at least
    one). A limit that does not parse counts as the default: its own check reports it."""
    try:
        per_sandbox = int(memory_mb) if memory_mb not in (None, "") else 4096
    except (TypeError, ValueError):
        per_sandbox = 4096
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 1  # a machine that will not say: no overcommitting it
    return max(1, total // (max(per_sandbox, 1) * 2**20))


class Settings(BaseModel):
    """hangar's configuration. Frozen: build a new one with :meth:`replace` to change it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    data_dir: Path
    db: str = Field(description="State database URL: sqlite:///PATH or firestore://PROJECT/DB")
    session_store: str = Field(description="Blob store URL: file:///PATH or gs://BUCKET/PREFIX")
    keys: str = Field(description="Key URL: local:///PATH or gcpkms://projects/...")
    ticks: str = "local:"
    sandboxes: str = Field(description="Sandbox backend URL: local:///PATH or gke://CTX/NS")
    harness_dir: Path
    url: str = "http://127.0.0.1:8080"
    token: str | None = None
    kms_endpoint: str | None = Field(
        None, description="Cloud KMS REST endpoint (the stand-in); unset: the real service"
    )
    signing_key_file: Path | None = Field(
        None, description="A service account key file (JSON, as Google issues them) whose key "
        "signs the URLs sandboxes move checkpoints with; unset: "
        "HANGAR_SIGNING_SERVICE_ACCOUNT signs")
    signing_service_account: str | None = Field(
        None, pattern=r"^[^@/\s]+@[^@/\s]+$", description="The service account (email) that "
        "signs those URLs through the IAM Credentials API's signBlob (on Cloud Run the "
        "function's own, allowed signBlob on itself); unset, and no key file: no signed URLs, "
        "checkpoints go through the control plane")
    iam_endpoint: str | None = Field(
        None, description="IAM Credentials REST endpoint (the stand-in); unset: the real service"
    )
    signed_url_endpoint: str = Field(
        "https://storage.googleapis.com", pattern=r"^https?://[^/?#@\s]+$", description="The "
        "scheme and host of signed URLs: the storage endpoint as the sandboxes reach it")
    tasks_endpoint: str | None = Field(
        None, description="Cloud Tasks endpoint HOST:PORT (the emulator); unset: the real service"
    )
    ticks_url: str | None = Field(
        None, description="Where Cloud Tasks posts ticks (the ticks function's URL)"
    )
    tasks_invoker: str | None = Field(
        None, description="Service account whose OIDC token Cloud Tasks sends with each tick"
    )
    gke_endpoint: str | None = Field(
        None, description="GKE API server URL for gke:// (Cloud Run); unset: the kubeconfig's"
    )
    gke_ca: str | None = Field(
        None, description="The CA of HANGAR_GKE_ENDPOINT's certificate (with gke_endpoint): its "
        "PEM text, or the path of a file holding it",
    )
    run_endpoint: str | None = Field(
        None, description="Cloud Run Admin REST endpoint (the stand-in); unset: the real service"
    )
    project: str | None = Field(
        None, description="Google Cloud project of the functions; unset: read from the cloud URLs"
    )
    region: str | None = Field(
        None, description="Region of the functions; unset: the Cloud Tasks or KMS location"
    )
    functions_prefix: str = Field(
        "hangar",
        pattern=r"^[a-z][a-z0-9-]*$",
        description="Terraform's name_prefix: the functions are PREFIX-api and PREFIX-ticks",
    )

    session_keep_checkpoints: int = Field(5, ge=1)
    session_max_part_mb: float = Field(100, gt=0)
    session_max_untracked_mb: float = Field(20, gt=0)
    session_max_restore_mb: float = Field(
        4096, gt=0, description="What one restore may write (the head's tree and every archive, "
        "uncompressed), in MiB; a checkpoint past it is not counted as known to restore")
    session_checkpoint_minutes: float = Field(10, ge=0)
    exchange_max_patch_mb: float = Field(
        10, gt=0, description="Patch items, and the largest get_session_patch, in MiB")
    exchange_max_bundle_mb: float = Field(50, gt=0, description="Bundle items, in MiB")
    exchange_max_context_items: int = Field(
        50, ge=1, description="Context items on one new or send")
    exchange_max_context_mb: float = Field(
        2, gt=0, description="text, file, log, issue and diff items of one turn, in MiB")
    exchange_upload_part_mb: float = Field(
        16, gt=0, description="The part size an upload is asked for, in MiB (under "
        "HANGAR_MAX_BODY_MB)")
    exchange_upload_expiry_minutes: float = Field(
        60, gt=0, description="How long an upload waits to be used before it is dropped")
    exchange_max_open_uploads: int = Field(
        20, ge=1, description="Uploads one token may hold at once (begun, neither used nor "
        "expired); one more is too_many_uploads")
    exchange_max_result_kb: float = Field(
        1024, gt=0, description="The largest out/result.json a turn may hand back, in KiB")
    exchange_max_artifacts: int = Field(
        50, ge=0, description="New or changed artifacts stored per turn (more are skipped)")
    exchange_max_artifact_mb: float = Field(25, gt=0, description="The largest artifact, in MiB")
    exchange_max_artifacts_mb: float = Field(
        100, gt=0, description="Artifacts stored per turn, in MiB (more are skipped)")
    exchange_inline_artifact_kb: float = Field(
        512, gt=0, description="The largest artifact get_artifact answers inline, in KiB")
    exchange_repair_timeout_minutes: float = Field(
        10, gt=0, description="How long the repair turn for a missing or invalid result may run")
    checkpoint_timeout_seconds: float = Field(300, gt=0)
    checkpoint_format: Literal[1, 2] = Field(
        2, description="How new checkpoints are stored: 2, content-addressed chunks (a turn "
        "stores what changed); 1, every part whole, as hangar did before. Both restore")
    checkpoint_direct: bool = Field(
        True, description="Format-2 checkpoints and restores move their bytes straight between "
        "the sandbox and the bucket through signed URLs, where the blobs backend can sign them "
        "(gs:// with signing credentials) and the sandboxes reach the bucket (gke://); false: "
        "every byte goes through the control plane")
    sandbox_crypto: Path | None = Field(
        None, description="The folder of cryptography that hangar installs in sandboxes which "
        "seal checkpoints themselves (what make sandbox-crypto puts in "
        "build/sandbox-crypto/MACHINE, for the sandboxes' machine), or its .tar.gz; unset: the "
        "repository's build/sandbox-crypto/MACHINE for this machine, when it is there, else "
        "the sandbox-crypto/x86_64.tar.gz that make package ships beside the hangar package")
    sandbox_ttl_minutes: float = Field(120, gt=0)
    prebuild_environments: str = Field(
        "", description="Environments whose sandbox templates and warm pools are made at start "
        "(comma separated names, or all), so that their first session does not wait; gke://")
    activity_grace_seconds: float = Field(90, ge=0)
    setup_timeout_minutes: float = Field(15, gt=0)
    turn_timeout_minutes: float = Field(
        120, gt=0, le=10_080, description="How long a turn may run before it is stopped and ends "
        "timed_out, in minutes (fractions allowed); an environment or a send may set its own")
    turn_idle_minutes: float = Field(
        15, gt=0, le=10_080, description="How long a turn may go with neither a new line in its "
        "run log nor any output from the harness before it is stopped and ends timed_out")
    claim_lease_seconds: float = Field(
        120, gt=0, description="How long a claim on a session (a start, a suspend, a turn's end) "
        "lasts unless its worker renews it; an expired one is taken over",
    )
    sandbox_uid_base: int = Field(
        200_000, ge=1000, le=2**31 - 2 * 4096,
        description="First host uid of local sandboxes: base+2n is hangar's, base+2n+1 the agent's",
    )
    sandbox_limits: Literal["auto", "cgroup", "rlimit"] = Field(
        "auto", description="How the agent's limits are enforced: auto, cgroup or rlimit"
    )
    tree_slow_ms: float = Field(
        2000, ge=0, le=600_000, description="Each turn records its working tree's git tree "
        "at its start and end, a live turn after each edit or shell step too; one hash slower "
        "than this many milliseconds stops it for the turn; 0: no trees")
    live_turns: bool = Field(
        True, description="Run turns live where the harness can (Claude Code, Codex, pi): a "
        "steer reaches the running turn and an interrupt ends it gracefully; false makes every "
        "turn one-shot (a send while one runs is session_busy)")
    notify_url: str | None = Field(
        None, description="Where hangar POSTs a signed JSON event when a session needs input, "
        "an approval is pending, or a turn failed or finished (http:// or https://, no "
        "credentials in it); unset: nobody is told (docs/sessions.md, Being told)")
    notify_secret: SecretStr | None = Field(
        None, description="The key (16 characters at least) that signs those events "
        "(HMAC-SHA256); required with HANGAR_NOTIFY_URL. A secret: never shown")
    approval_timeout_minutes: float = Field(
        60, gt=0, le=7 * 24 * 60, description="An approval nobody answers is denied after this "
        "many minutes, with a message saying so (a forgotten one never holds a sandbox)")
    max_message_kb: int = Field(
        1024, ge=1, le=16384, description="The largest message of a new or a send, in KiB of "
        "UTF-8; larger ones get 413 message_too_large with nothing started")
    max_body_mb: float = Field(
        32, gt=0, le=1024, description="The largest request body the API reads, in MiB (Cloud "
        "Run's own request limit is 32); larger ones get 413 before they are read",
    )
    sandbox_max_pids: int = Field(1024, ge=16, description="Processes and threads of the agent")
    sandbox_memory_mb: int = Field(
        4096, ge=64, description="The agent's memory (cgroup: all of it; rlimit: per process)"
    )
    sandbox_disk_gb: float = Field(
        20, ge=0, le=1 << 20, description="What a local sandbox may write, in GiB (fractions "
        "allowed, 32 MiB at least): past it writes fail inside with ENOSPC; 0: no cap",
    )
    max_sandboxes: int = Field(
        ge=0, description="Sandboxes that may live at once; a start past it is "
        "capacity_exhausted; 0: no cap of hangar's. Default: on local sandboxes, this "
        "machine's memory over HANGAR_SANDBOX_MEMORY_MB (at least 1), worked out when the "
        "settings are built; on a cluster (gke://), 0 (its quotas and node limits hold)",
    )

    @model_validator(mode="before")
    @classmethod
    def _fill_defaults(cls, values: Any) -> Any:
        if not isinstance(values, dict):
            return values
        data_dir = Path(values.get("data_dir") or _default_data_dir({})).expanduser().absolute()
        values["data_dir"] = data_dir
        values.setdefault("db", f"sqlite://{data_dir}/hangar.db")
        values.setdefault("session_store", f"file://{data_dir}/blobs")
        values.setdefault("keys", f"local://{data_dir}/vault.key")
        values.setdefault("sandboxes", f"local://{data_dir}/sandboxes")
        values.setdefault("harness_dir", _default_harness_dir({}))
        if values.get("max_sandboxes") in (None, ""):
            local = str(values["sandboxes"]).startswith("local://")
            values["max_sandboxes"] = (_default_max_sandboxes(values.get("sandbox_memory_mb"))
                                       if local else 0)  # fmt: skip
        return values

    @field_validator("notify_url")
    @classmethod
    def _check_notify_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname or any(
            c.isspace() for c in value
        ):
            raise ValueError("must be an http:// or https:// URL")
        if "@" in parts.netloc:  # it shows in logs and in the settings' repr
            raise ValueError("must not hold credentials: the events are signed instead")
        return value

    @model_validator(mode="after")
    def _check_notify_secret(self) -> Settings:
        # Raised as it is (not a ValueError): a model-wide error would name no setting.
        secret = self.notify_secret.get_secret_value() if self.notify_secret else ""
        if self.notify_url is not None and not secret:
            raise InvalidSettings("HANGAR_NOTIFY_URL is set but HANGAR_NOTIFY_SECRET is not: "
                                  "events are always signed", setting="HANGAR_NOTIFY_SECRET")
        if secret and len(secret) < 16:
            raise InvalidSettings("invalid setting HANGAR_NOTIFY_SECRET: it must be 16 "
                                  "characters at least", setting="HANGAR_NOTIFY_SECRET")
        return self

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        """Build settings from ``HANGAR_*`` variables; unknown ``HANGAR_*`` names are ignored.

        Raises :class:`InvalidSettings` naming the variable when a value does not parse.
        """
        values: dict[str, Any] = {}
        for name in cls.model_fields:
            raw = env.get(_PREFIX + name.upper())
            if raw not in (None, ""):
                values[name] = raw
        values.setdefault("data_dir", _default_data_dir(env))
        values.setdefault("harness_dir", _default_harness_dir(env))
        return cls.build(**values)

    @classmethod
    def build(cls, **values: Any) -> Settings:
        """Build settings from keyword values (tests use this), mapping errors to InvalidSettings."""
        try:
            return cls(**values)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"]) or "settings"
            raise InvalidSettings(
                f"invalid setting {_PREFIX}{field.upper()}: {first['msg']}",
                setting=_PREFIX + field.upper(),
            ) from None

    def replace(self, **changes: Any) -> Settings:
        """A copy with ``changes`` applied and validated."""
        return Settings.build(**{**self.model_dump(), **changes})

    @property
    def prebuilt(self) -> frozenset[str] | None:
        """The environments HANGAR_PREBUILD_ENVIRONMENTS names (blanks ignored); None for
        ``all``."""
        names = frozenset(n.strip() for n in self.prebuild_environments.split(",") if n.strip())
        return None if "all" in names else names

    @property
    def max_part_bytes(self) -> int:
        return int(self.session_max_part_mb * 1024 * 1024)

    @property
    def max_untracked_bytes(self) -> int:
        return int(self.session_max_untracked_mb * 1024 * 1024)

    @property
    def max_bundle_bytes(self) -> int:
        return int(self.exchange_max_bundle_mb * 1024 * 1024)

    @property
    def max_restore_bytes(self) -> int:
        return int(self.session_max_restore_mb * 1024 * 1024)

    @property
    def max_context_bytes(self) -> int:
        return int(self.exchange_max_context_mb * 1024 * 1024)

    @property
    def max_patch_bytes(self) -> int:
        return int(self.exchange_max_patch_mb * 1024 * 1024)

    @property
    def max_result_bytes(self) -> int:
        return int(self.exchange_max_result_kb * 1024)

    @property
    def max_artifact_bytes(self) -> int:
        return int(self.exchange_max_artifact_mb * 1024 * 1024)

    @property
    def max_artifacts_bytes(self) -> int:
        return int(self.exchange_max_artifacts_mb * 1024 * 1024)

    @property
    def inline_artifact_bytes(self) -> int:
        return int(self.exchange_inline_artifact_kb * 1024)
