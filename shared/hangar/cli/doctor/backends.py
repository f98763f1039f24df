"""The doctor's checks of the settings and of every backend they name.

:func:`configuration` warns about combinations the spec advises against (checkpoints off GCS
while sandboxes run on GKE; a local key file guarding checkpoints on GCS) and says where Cloud
Tasks ticks go when no ticks URL is set. :func:`reachability` makes one cheap call per backend,
each bounded in time, through hangar's own ports where they can do it:

- db: a read of a session that does not exist (``session_not_found`` is the healthy answer);
- blobs: the checkpoints' prefix listed (on GCS with the client directly: one object at most);
- keys: a random 32-byte data key wrapped and unwrapped (a missing local key file is not made:
  with checkpoints stored, that is a FAIL, as :class:`hangar.runtime.Runtime` refuses to start);
- ticks: the Cloud Tasks queue read with the client directly;
- direct checkpoints (GCS and GKE only): one URL signed for nothing in particular, and whether
  the sandboxes' ``cryptography`` is at hand, or why checkpoints go through the control plane.

Nothing is created: a missing SQLite file or key file is reported, not made.
"""

from __future__ import annotations

import re
import secrets
import stat
from collections.abc import Mapping
from pathlib import Path

from hangar.blobs import open_blobs
from hangar.cli.doctor.report import Report, fetch, probe, shown
from hangar.config import Settings
from hangar.db import open_db
from hangar.errors import BackendError, HangarError, SessionNotFound
from hangar.keys import Keys, open_keys

CHECKPOINTS = "sessions/"
"""Where checkpoint parts live in the blob store."""
PROBE_SESSION = "doctor-probe"
TASKS_QUEUE = re.compile(
    r"^cloudtasks://(?P<name>projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)"
    r"/queues/(?P<queue>[^/]+))$"
)


def configuration(report: Report, settings: Settings) -> None:
    """Advice on how the backends are combined (WARN and INFO lines only)."""
    store = settings.session_store
    if settings.sandboxes.startswith("gke:") and not store.startswith("gs:"):
        report.line("WARN", f"checkpoints are not on GCS while sandboxes run on GKE "
                    f"(HANGAR_SESSION_STORE {shown(store)}): they live and die with this "
                    "machine's disk; set HANGAR_SESSION_STORE=gs://BUCKET/PREFIX")  # fmt: skip
    if store.startswith("gs:") and settings.keys.startswith("local:"):
        report.line("WARN", f"checkpoints on GCS are wrapped by a local key file (HANGAR_KEYS "
                    f"{shown(settings.keys)}): losing that file loses every checkpoint; use "
                    "Cloud KMS (HANGAR_KEYS=gcpkms://...) or keep the file backed up")  # fmt: skip
    if settings.ticks.startswith("cloudtasks:") and not settings.ticks_url:
        report.line("INFO", "HANGAR_TICKS is Cloud Tasks and HANGAR_TICKS_URL is unset: "
                    "hangar serve has the ticks posted to itself (the functions need it set "
                    "to the ticks function's URL)")  # fmt: skip


def reachability(
    report: Report, settings: Settings, env: Mapping[str, str], seconds: float
) -> None:
    """One line per backend: db, blobs, keys, ticks."""
    _db(report, settings, seconds)
    stored = _blobs(report, settings, env, seconds)
    _keys(report, settings, stored, seconds)
    _ticks(report, settings, seconds)
    _direct(report, settings, seconds)


def _sqlite_file(url: str) -> Path | None:
    """The file a ``sqlite:///PATH`` URL names (None for another URL or ``:memory:``)."""
    scheme, _, rest = url.partition(":")
    if scheme != "sqlite" or not rest.startswith("///"):
        return None
    path = "/" + rest.lstrip("/")
    return None if path == "/:memory:" else Path(path)


def _db(report: Report, settings: Settings, seconds: float) -> None:
    label = f"db (HANGAR_DB {shown(settings.db)})"
    file = _sqlite_file(settings.db)
    if file is not None and not file.exists():
        report.line("INFO", f"{label}: {file} does not exist yet (hangar serve makes it)")
        return

    def read() -> str:
        db = open_db(settings.db, settings)
        try:
            db.get_session(PROBE_SESSION)
        except SessionNotFound:
            pass
        finally:
            db.close()
        return "answered a read"

    probe(report, label, seconds, read)


def _blobs(
    report: Report, settings: Settings, env: Mapping[str, str], seconds: float
) -> bool | None:
    """Whether checkpoints are stored; None when the store could not be listed."""
    url = settings.session_store
    label = f"blobs (HANGAR_SESSION_STORE {shown(url)})"

    def listed() -> bool:
        if url.startswith("gs:"):
            return _gcs_holds_checkpoints(url, env, seconds)
        return bool(open_blobs(url, settings).list(CHECKPOINTS))

    stored = fetch(report, label, seconds, listed)
    if stored is not None:
        what = "checkpoints are stored" if stored else "no checkpoints yet"
        report.line("OK", f"{label}: listed {CHECKPOINTS} ({what})")
    return stored


def _gcs_holds_checkpoints(url: str, env: Mapping[str, str], seconds: float) -> bool:
    """One object at most listed under the checkpoints' prefix. Through the client directly:
    the port's ``list`` reads every name. ``STORAGE_EMULATOR_HOST`` in ``env`` is honoured."""
    from hangar.blobs.gcs import GcsBlobs, storage_client

    store = GcsBlobs.from_url(url)  # InvalidSettings naming HANGAR_SESSION_STORE
    client = storage_client(env)
    found = client.list_blobs(
        store.bucket_name, prefix=store.prefix + CHECKPOINTS, max_results=1,
        timeout=seconds, retry=None,
    )  # fmt: skip
    return any(True for _ in found)


def _keys(report: Report, settings: Settings, stored: bool | None, seconds: float) -> None:
    label = f"keys (HANGAR_KEYS {shown(settings.keys)})"
    try:
        keys = open_keys(settings.keys, settings)
    except HangarError as exc:
        report.line("FAIL", f"{label}: {exc.message} ({exc.code})")
        return
    if not _local_key_file(report, label, keys, stored, settings):
        return

    def round_trip() -> str:
        data_key = secrets.token_bytes(32)
        if keys.unwrap(keys.wrap(data_key)) != data_key:
            raise BackendError("a wrapped data key unwrapped to other bytes")
        return "wrapped and unwrapped a random data key"

    probe(report, label, seconds, round_trip)


def _local_key_file(
    report: Report, label: str, keys: Keys, stored: bool | None, settings: Settings
) -> bool:
    """Whether there is a key to probe (always, except a local key file that is missing, which
    is reported here). Never makes the file."""
    from hangar.keys.local import LocalKeys

    if not isinstance(keys, LocalKeys):
        return True
    path = keys.path
    if path.exists():
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            report.line("WARN", f"{label}: {path} has mode {mode:o}: chmod 600 it")
        return True
    store = shown(settings.session_store)
    if stored:
        report.line("FAIL", f"{label}: the key file {path} is missing but checkpoints exist in "
                    f"{store}: put the key file back (a new key could not decrypt "
                    "them)")  # fmt: skip
    elif stored is None:
        report.line("WARN", f"{label}: the key file {path} is missing and {store} could not "
                    "be listed: if checkpoints exist, put the key file back before hangar "
                    "starts")  # fmt: skip
    else:
        report.line("INFO", f"{label}: {path} does not exist yet: hangar serve makes it the "
                    "first time it seals something (an environment's secret, a turn's log, a "
                    "checkpoint), not at start; back it up then: every checkpoint needs "
                    "it")  # fmt: skip
    return False


def _ticks(report: Report, settings: Settings, seconds: float) -> None:
    url = settings.ticks
    label = f"ticks (HANGAR_TICKS {shown(url)})"
    if url.split(":", 1)[0] == "local":
        report.line("OK", f"{label}: the in-process ticker of hangar serve (due-times in the db)")
        return
    match = TASKS_QUEUE.match(url)
    if match is None:
        report.line("FAIL", f"{label}: expected local: or "
                    "cloudtasks://projects/P/locations/L/queues/Q (invalid_settings)")  # fmt: skip
        return
    if settings.tasks_endpoint:
        label = f"{label} at HANGAR_TASKS_ENDPOINT {settings.tasks_endpoint}"
    queue, endpoint = match["name"], settings.tasks_endpoint
    state = fetch(report, label, seconds, lambda: _queue_state(queue, endpoint, seconds))
    if state == "RUNNING":
        report.line("OK", f"{label}: the queue is running")
    elif state is not None:
        report.line("WARN", f"{label}: the queue is {state}: no tick is delivered until it "
                    "runs (gcloud tasks queues resume)")  # fmt: skip


def _queue_state(name: str, endpoint: str | None, seconds: float) -> str:
    """The queue's state by name (RUNNING, PAUSED, DISABLED), read with the Cloud Tasks client:
    over gRPC without credentials to ``endpoint`` (the emulator) when set."""
    from google.cloud import tasks_v2

    from hangar.ticks.cloudtasks import tasks_client

    client = tasks_client(endpoint.split("://", 1)[-1] if endpoint else None)
    with client:  # closes the channel
        queue = client.get_queue(name=name, retry=None, timeout=seconds)
    return str(tasks_v2.Queue.State(queue.state).name)


def _direct(report: Report, settings: Settings, seconds: float) -> None:
    """Whether checkpoints go straight between GKE sandboxes and GCS (docs/architecture.md,
    *Direct*): said only where they could."""
    if not (settings.session_store.startswith("gs:") and settings.sandboxes.startswith("gke:")):
        return
    label = "direct checkpoints"
    if not settings.checkpoint_direct:
        report.line("INFO", f"{label}: off (HANGAR_CHECKPOINT_DIRECT=false): every checkpoint "
                    "byte goes through the control plane")  # fmt: skip
        return
    from hangar.agent.toolkit import crypto_folder
    from hangar.blobs.gcs import GcsBlobs
    from hangar.blobs.signing import url_signer

    signer = url_signer(GcsBlobs.from_url(settings.session_store, settings))
    if signer is None:
        report.line("WARN", f"{label}: nothing signs URLs (set HANGAR_SIGNING_SERVICE_ACCOUNT, "
                    "or HANGAR_SIGNING_KEY_FILE): every checkpoint byte goes through the "
                    "control plane")  # fmt: skip
        return
    signs = settings.signing_service_account or f"the key in {settings.signing_key_file}"

    def sign() -> str:
        signer.sign_get(f"{CHECKPOINTS}{PROBE_SESSION}", 60)
        return f"signed a URL as {signs}"

    if not probe(report, label, seconds, sign):
        return
    if crypto_folder(settings) is None:
        report.line("WARN", f"{label}: no cryptography for the sandboxes (HANGAR_SANDBOX_CRYPTO; "
                    "make sandbox-crypto): they cannot seal, so checkpoints go through the "
                    "control plane")  # fmt: skip
