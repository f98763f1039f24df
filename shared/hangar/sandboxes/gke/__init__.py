"""GKE sandboxes: the Kubernetes Agent Sandbox, driven through the official ``kubernetes`` client.

``gke://CONTEXT/NAMESPACE`` (optionally ``?image=REF&runtime_class=NAME&warm_pool=N&deny=CIDR,
CIDR``): a kubeconfig context (``KUBECONFIG`` as it is when the backend opens, or the default
file) and the namespace the sandboxes live in; with ``HANGAR_GKE_ENDPOINT`` (and
``HANGAR_GKE_CA``) set, as on Cloud Run, the API server is that endpoint and the token is
Google's default credentials', and the URL's context is ignored.

- One ``SandboxWarmPool`` per spec ``pool`` (an environment) over one ``SandboxTemplate``
  named by the pool and a hash of the image, pod settings and network
  (:mod:`hangar.sandboxes.gke.manifests`). A pool ``create`` makes starts with the URL's
  ``warm_pool`` ready sandboxes (default 0: the count for an environment with no warm pool of
  its own); after that its replicas are ``keep_pool``'s alone (the session service's pool
  ticks set an environment's ``warm_pool`` on its hours), never ``create``'s. A ``create``
  that finds the pool on another template makes the new one, repoints the pool and deletes
  the pool's old templates no live claim was made on; what it found is cached, so a
  ``create`` with nothing changed is one request (the claim). ``image`` is required: the
  spec's, else the URL's (InvalidInput without either).
- The template's NetworkPolicy: no ingress; egress to DNS and everywhere but the metadata
  server, ``deny`` (default :data:`~.manifests.INTERNAL_RANGES`) and the control plane's
  address (when the API server is named by an IP address).
- A sandbox is a ``SandboxClaim`` named ``hangar-<8 hex>`` (its id) on its pool; ``create``
  returns once the claim exists, ``status`` reads its ``Ready`` condition, ``await_status``
  reads it and, while pending, watches it (no polling; a 410 Gone watch is resumed from a
  fresh read), ``destroy`` deletes it. Its ``lifecycle.shutdownTime`` is :data:`LEASE_MARGIN` past the sandbox's TTL
  (``HANGAR_SANDBOX_TTL_MINUTES``), moved on by ``extend`` (by :data:`LEASE_SLACK` more): the
  cluster deletes a sandbox hangar forgot, never one hangar's reaper would still checkpoint
  first.
- Every command runs through ``pods/exec`` on the v5 channel as a fixed bootstrap
  (:data:`~hangar.sandboxes.gke.podexec.BOOT`): argv, environment, cwd, user and deadline travel
  as one header on stdin, never on the exec's URL (which API audit logs keep). The bootstrap
  runs as the pod's root (with only :data:`~hangar.sandboxes.gke.manifests.AGENT_CAPABILITIES`),
  becomes the agent (uid 1000, no groups, ``no_new_privs``) or stays hangar, and kills the
  command's process group at its deadline or when told to stop; the rest of stdin is the
  command's. A cancelled exec also kills its command by a second exec (:data:`~.podexec.KILL`):
  a runtime need not kill an exec's command when its stream closes.
- ``put_file`` streams a file in one exec, renamed into place only once all of it came; when
  that exec breaks off (a connection dropped mid-way) and the data can be read again (bytes, a
  file that seeks), it is written again in chunks of 8 MiB, each its own exec at its offset
  into a temp file of hangar's, then one exec checks the size and renames it into place with
  the mode (:mod:`hangar.sandboxes.gke.files`): a 50 MB file survives a connection that drops.
- Every exception the client and its transports raise is turned into hangar's by one table
  (:data:`~.errors.TABLE`, :mod:`hangar.sandboxes.gke.errors`) inside this backend.

Nothing imports ``kubernetes`` until a ``gke://`` backend is opened.
"""

from __future__ import annotations

import json
import logging
import math
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, BinaryIO, NoReturn, cast

from hangar.config import Settings
from hangar.errors import (
    ExecTimeout,
    HangarError,
    InvalidInput,
    SandboxError,
    SandboxNotFound,
    SandboxUnavailable,
)
from hangar.sandboxes import (
    HANGAR_BIN,
    HANGAR_DIR,
    HANGAR_TMP,
    HOME,
    CountingWriter,
    ExecResult,
    PoolState,
    SandboxCapabilities,
    SandboxInfo,
    SandboxSpec,
    SandboxState,
    SandboxStatus,
    SandboxUser,
    Stdin,
    check_env,
    refuse_missing,
    stderr_tail,
)
from hangar.sandboxes.gke import manifests as objects
from hangar.sandboxes.gke import files, reasons
from hangar.sandboxes.gke.manifests import Network, PodSettings
from hangar.sandboxes.gke.config import configuration, control_plane, parse_url
from hangar.sandboxes.gke.errors import TABLE, WatchExpired, translate, vendor_errors
from hangar.sandboxes.gke.pools import WarmPools
from hangar.sandboxes.gke.podexec import BOOT_ARGV, ENV_FILE, KILL, drain, exit_code, feed

__all__ = ["TABLE", "GkeSandboxes", "configuration", "parse_url", "translate"]

logger = logging.getLogger(__name__)

AGENT_PATH = (f"{HANGAR_BIN}:{HANGAR_DIR}/harnesses/bin:{HANGAR_DIR}/harnesses/node_modules/.bin:"
              "/usr/local/bin:/usr/bin:/bin")  # fmt: skip
HANGAR_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_TIMEOUT_GRACE = 10.0  # seconds past a deadline before hangar stops waiting for the pod's kill
_POD_CACHE = 4096  # pod names kept per backend
_READ_POLL = 0.1  # seconds between looks at cancel and the deadline while output is awaited
_WATCH_RESUMES = 3  # watches of one await_status resumed after a 410, before it gives up
_WATCH_GRACE = 10  # seconds past a watch's own timeout before hangar stops reading it
_CONNECT_TIMEOUT = 10.0  # seconds to connect for a watch
LEASE_MARGIN = timedelta(minutes=15)
"""How long past hangar's own expiry of a sandbox the cluster's lease on it runs: the reaper
checkpoints and destroys a sandbox once its TTL has passed (a pass every minute, a checkpoint
taking minutes at worst), and the cluster deletes it, unsaved, only at this margin later."""
LEASE_SLACK = timedelta(minutes=5)
"""How much further than the margin a renewed lease is set, so that an expiry that moves on a
little at a time (a running turn's) costs a patch every few minutes, not one per look."""

class GkeSandboxes:
    """The ``gke://`` backend of :class:`hangar.sandboxes.Sandboxes` (the module's docstring).

    ``image`` is the default image of a spec without one; ``pod`` and ``network`` the pod
    settings and network of every template made; ``replicas`` what a pool made by ``create``
    starts with; ``ttl`` a new
    sandbox's (its claim's lease, :data:`LEASE_MARGIN` later). Thread-safe: each exec has a
    client of its own (the client's websocket helper swaps a method of the client it is given
    while it runs).
    """

    capabilities = SandboxCapabilities(images=True, pools=True, object_store=True)
    """Images and warm pools, yes; no host paths, host ports or host reads (the pod is on
    another machine)."""

    def __init__(self, cfg: Any, namespace: str, *, image: str | None = None,
                 pod: PodSettings | None = None, network: Network | None = None,
                 replicas: int = 0, ttl: timedelta = timedelta(hours=2)) -> None:  # fmt: skip
        from kubernetes import client

        self.cfg = cfg
        self.namespace = namespace
        self.image = image
        self.pod = pod or PodSettings()
        self.network = network or Network()
        self.replicas = replicas
        self.ttl = ttl
        self._api = client.ApiClient(cfg)
        self._objects = client.CustomObjectsApi(self._api)
        policy = objects.network_policy(self.network, control_plane(cfg.host))
        self.pools = WarmPools(self._objects, namespace, self.pod, policy, replicas, translate,
                               vendor_errors())  # fmt: skip
        self._leases: dict[str, datetime] = {}  # sandbox id -> its claim's shutdownTime
        self._pods: dict[str, str] = {}  # sandbox id -> its pod's name (stable for a claim)
        self._bound: dict[str, str] = {}  # sandbox id -> the Sandbox its claim holds (fixed)
        self._pending_env: dict[str, dict[str, str]] = {}  # spec env not yet in its pod

    @classmethod
    def from_url(cls, url: str, settings: Settings) -> GkeSandboxes:
        """Open the backend ``url`` names (:func:`parse_url`, :func:`configuration`)."""
        context, namespace, options = parse_url(url)
        pod = PodSettings(memory_mb=settings.sandbox_memory_mb,
                          runtime_class=options.get("runtime_class"))  # fmt: skip
        deny = options.get("deny")
        network = Network(tuple(filter(None, deny.split(",")))) if deny is not None else None
        return cls(configuration(context, settings), namespace, image=options.get("image"),
                   pod=pod, network=network, replicas=int(options.get("warm_pool", "0")),
                   ttl=timedelta(minutes=settings.sandbox_ttl_minutes))  # fmt: skip

    # -- the port ---------------------------------------------------------------------------

    def create(self, spec: SandboxSpec) -> SandboxInfo:
        """Bring the spec's pool and its template in step (made or repointed as needed, its
        replicas left as they are; nothing asked when this backend already did so), then
        claim a sandbox of it;
        returns once the claim exists. InvalidInput without an image; SandboxCapabilityMissing
        for ro_paths or host_ports."""
        refuse_missing(self.capabilities, spec, "gke")
        image = spec.image or self.image
        if not image:
            raise InvalidInput("a gke sandbox needs an image: set the environment's image "
                               "(hangar env update --image IMAGE)", field="image")  # fmt: skip
        spec_env = check_env(spec.env)
        pool = objects.pool_name(spec.pool)
        template = self.pools.ensure(pool, image)
        sandbox_id = f"hangar-{secrets.token_hex(4)}"
        now = datetime.now(UTC)
        lease = _whole_second(now + self.ttl + LEASE_MARGIN)
        body = objects.claim(sandbox_id, pool, spec.labels, now, lease, template)
        made = self._call(lambda: self._objects.create_namespaced_custom_object(
            objects.EXTENSIONS_GROUP, objects.VERSION, self.namespace, objects.CLAIMS, body))
        if spec_env:
            self._pending_env[sandbox_id] = spec_env
        self._remember(sandbox_id, lease)
        return _info(made)

    def keep_pool(self, pool: str, *, image: str | None, replicas: int) -> PoolState:
        """Keep the environment ``pool``'s SandboxWarmPool at ``replicas`` (the port's
        contract): in step for ``image`` (None: the URL's; neither: the pool is only scaled,
        InvalidInput if it is missing), then one read and, when the count differs, one patch."""
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            raise InvalidInput(f"a warm pool's replicas must be a whole number of at least 0, "
                               f"not {replicas!r}", field="warm_pool")  # fmt: skip
        image = image or self.image
        try:
            wanted, ready = self.pools.keep(objects.pool_name(pool), image, replicas)
        except SandboxNotFound:
            raise InvalidInput(f"warm pool {pool} does not exist and there is no image to make "
                               "it with: set the environment's image (hangar env update "
                               "--image IMAGE)", field="image") from None  # fmt: skip
        return PoolState(pool=pool, replicas=wanted, ready=ready)

    def extend(self, sandbox_id: str, until: datetime) -> None:
        """Keep the claim's shutdownTime at least ``until`` plus :data:`LEASE_MARGIN`: when it
        is earlier, it is moved on to that plus :data:`LEASE_SLACK`. No request when this
        backend set or read a late enough one itself; one (the patch) when it set or read an
        earlier one (hangar only ever moves a session's expiry on, so no other process set a
        later one meanwhile); else the claim is read first. A missing sandbox is nothing to
        do."""
        due = _whole_second(until + LEASE_MARGIN)
        known = self._leases.get(sandbox_id)
        if not _is_ours(sandbox_id) or (known is not None and known >= due):
            return
        try:
            current = known or objects.shutdown_time(self._claim(sandbox_id))
            if current is None or current < due:
                lease = due + LEASE_SLACK
                patch = {"spec": {"lifecycle": {"shutdownTime": objects.rfc3339(lease),
                                                "shutdownPolicy": "Delete"}}}  # fmt: skip
                self._call(lambda: self._objects.patch_namespaced_custom_object(
                    objects.EXTENSIONS_GROUP, objects.VERSION, self.namespace, objects.CLAIMS,
                    sandbox_id, patch), sandbox_id)  # fmt: skip
                current = lease
        except SandboxNotFound:
            return
        self._remember(sandbox_id, current)

    def status(self, sandbox_id: str) -> SandboxStatus:
        """The claim's Ready condition read (:func:`~.manifests.claim_status`), explained
        by its pod's events while it is not ready (:meth:`_explained`); SandboxNotFound once
        the claim is gone. A ready claim's Sandbox is remembered for the first exec."""
        return self._explained(sandbox_id, self._seen(sandbox_id, self._claim(sandbox_id)))

    def await_status(self, sandbox_id: str, timeout: float) -> SandboxStatus:
        """The claim's status as soon as it is ready or failed, else after ``timeout`` seconds
        the last pending one; SandboxNotFound once the claim is gone (or deleted meanwhile).
        One read of the claim; while it is pending, one watch of it (``metadata.name``) from
        that read's resourceVersion for what is left of ``timeout``, ended at the first event
        that makes it ready, failed or gone. A watch answered 410 Gone (its resourceVersion
        expired) is resumed from a fresh read (:meth:`_claim_now`), at most
        :data:`_WATCH_RESUMES` times. A claim not ready is explained by its pod's events
        (:meth:`_explained`) before the watch and at its end, so a pod whose image cannot be
        pulled fails the wait at once, and a pending answer says why."""
        deadline = time.monotonic() + max(timeout, 0.0)
        claim = self._claim(sandbox_id)
        since = str(claim["metadata"]["resourceVersion"])
        for _ in range(_WATCH_RESUMES + 1):
            status = self._explained(sandbox_id, self._seen(sandbox_id, claim))
            left = deadline - time.monotonic()
            if status.state is not SandboxState.PENDING or left <= 0:
                return status
            try:
                watched = self._watch_claim(sandbox_id, since, status, left)
                return self._explained(sandbox_id, watched)
            except WatchExpired:
                logger.info("the watch of sandbox %s expired; reading it again", sandbox_id)
            claim, since = self._claim_now(sandbox_id)
        return status

    def _claim_now(self, sandbox_id: str) -> tuple[dict[str, Any], str]:
        """The claim read by a list of its name, and the list's resourceVersion (the server's
        now: a watch from it cannot be expired at once, as one from the claim's own version,
        older than the events just dropped, would be); SandboxNotFound once it is gone."""
        found = self._call(lambda: self._objects.list_namespaced_custom_object(
            objects.EXTENSIONS_GROUP, objects.VERSION, self.namespace, objects.CLAIMS,
            field_selector=f"metadata.name={sandbox_id}"), sandbox_id)  # fmt: skip
        claims = [c for c in found.get("items") or [] if _live(c)]
        if not claims:
            raise SandboxNotFound(f"no sandbox {sandbox_id}", sandbox_id=sandbox_id)
        return claims[0], str(found["metadata"]["resourceVersion"])

    def _watch_claim(self, sandbox_id: str, since: str, status: SandboxStatus,
                     seconds: float) -> SandboxStatus:  # fmt: skip
        """Watch the claim from resourceVersion ``since`` for up to ``seconds``: the status
        of the first event that is no longer pending, else the last pending one (``status``
        when none came). WatchExpired on 410 Gone; SandboxNotFound when it is deleted."""
        from kubernetes import watch

        whole = max(1, math.ceil(seconds))
        watcher = cast(Any, watch).Watch()  # the client has no types
        events = watcher.stream(
            self._objects.list_namespaced_custom_object, objects.EXTENSIONS_GROUP,
            objects.VERSION, self.namespace, objects.CLAIMS,
            field_selector=f"metadata.name={sandbox_id}",
            resource_version=since, timeout_seconds=whole,
            _request_timeout=(_CONNECT_TIMEOUT, whole + _WATCH_GRACE))  # fmt: skip
        try:
            for event in events:  # the request is made, and may fail, at the first look
                obj = event.get("raw_object") or {}
                if event.get("type") == "DELETED" or not _live(obj):
                    raise SandboxNotFound(f"sandbox {sandbox_id} was deleted",
                                          sandbox_id=sandbox_id)  # fmt: skip
                status = self._seen(sandbox_id, obj)
                if status.state is not SandboxState.PENDING:
                    return status
        except vendor_errors() as exc:
            raise translate(exc, sandbox_id) from exc
        finally:
            events.close()  # the stream's response is closed, its connection let go
        return status

    def _seen(self, sandbox_id: str, claim: Mapping[str, Any]) -> SandboxStatus:
        """The status of ``claim`` as read (:func:`~.manifests.claim_status`); the Sandbox
        it holds is remembered (a claim's never changes), for its events and the first exec."""
        status = objects.claim_status(claim)
        bound = objects.bound_sandbox(claim)
        if bound and sandbox_id not in self._bound:
            if len(self._bound) >= _POD_CACHE:
                self._bound.clear()
            self._bound[sandbox_id] = bound
        return status

    def _explained(self, sandbox_id: str, status: SandboxStatus) -> SandboxStatus:
        """``status``, or what the pod's events say instead (:func:`~.reasons.explain`)
        while the claim, last seen not ready, holds a Sandbox: one list of the pod's events
        (field selector on ``involvedObject``). Nothing is asked for a ready status, nor for
        a claim that holds no Sandbox yet (a warm claim being bound). The pod is named after
        the Sandbox unless this backend found it under another name. Events never turn a
        failed status pending; a refused or failed read leaves ``status`` as it was
        (logged: a Role without ``events`` costs the reasons, not the start)."""
        bound = self._bound.get(sandbox_id)
        if status.state is SandboxState.READY or bound is None:
            return status
        from kubernetes import client

        selector = f"involvedObject.kind=Pod,involvedObject.name={self._pods.get(sandbox_id, bound)}"
        try:
            found = self._call(lambda: client.CoreV1Api(self._api).list_namespaced_event(
                self.namespace, field_selector=selector), sandbox_id)  # fmt: skip
        except HangarError as exc:
            logger.warning("cannot read the events of sandbox %s: %s", sandbox_id, exc)
            return status
        events = cast(Any, self._api).sanitize_for_serialization(found).get("items") or []
        told = reasons.explain(events)
        if told is None or (status.state is SandboxState.FAILED and told.state is not SandboxState.FAILED):
            return status
        return told

    def get(self, sandbox_id: str) -> SandboxInfo:
        return _info(self._claim(sandbox_id))

    def list(self, labels: Mapping[str, str] | None = None) -> list[SandboxInfo]:
        """Claims hangar made whose labels include every given pair, oldest first."""
        wanted = {**(labels or {}), objects.MANAGED_BY: "hangar"}
        selector = ",".join(f"{k}={v}" for k, v in sorted(wanted.items()))
        found = self._call(lambda: self._objects.list_namespaced_custom_object(
            objects.EXTENSIONS_GROUP, objects.VERSION, self.namespace, objects.CLAIMS,
            label_selector=selector))  # fmt: skip
        claims = [c for c in found.get("items") or [] if _live(c)]
        infos = [_info(c) for c in claims]
        return sorted(infos, key=lambda i: (i.created_at, i.id))

    def destroy(self, sandbox_id: str) -> None:
        """Delete the claim (the controller deletes its sandbox and pod); a missing one is
        nothing to do. No hook runs."""
        self._pending_env.pop(sandbox_id, None)
        self._leases.pop(sandbox_id, None)
        self._pods.pop(sandbox_id, None)
        self._bound.pop(sandbox_id, None)
        if not _is_ours(sandbox_id):
            return
        try:
            self._call(lambda: self._objects.delete_namespaced_custom_object(
                objects.EXTENSIONS_GROUP, objects.VERSION, self.namespace, objects.CLAIMS,
                sandbox_id), sandbox_id)  # fmt: skip
        except SandboxNotFound:
            return

    def exec(
        self,
        sandbox_id: str,
        argv: Sequence[str],
        *,
        stdin: Stdin = None,
        stdout: BinaryIO | None = None,
        stderr: BinaryIO | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        user: SandboxUser = SandboxUser.AGENT,
        cancel: threading.Event | None = None,
    ) -> ExecResult:
        """Run ``argv`` in the sandbox's pod as ``user`` (the rules of the local backend: as
        the agent, cwd HOME and HOME, PATH, LANG, then the spec's env
        (:data:`~.podexec.ENV_FILE`), then ``env``, with HANGAR_BIN first on PATH; as hangar, cwd
        and HOME :data:`HANGAR_DIR`, TMPDIR :data:`HANGAR_TMP`, then ``env``). A timeout kills the
        command's process group in the pod and raises ExecTimeout; ``cancel`` ends the exec
        (the command is killed) and returns exit 137. SandboxNotFound if the claim is gone."""
        if not argv:
            raise InvalidInput("exec needs a command")
        agent = user is SandboxUser.AGENT
        if agent:
            full = {"HOME": HOME, "PATH": AGENT_PATH, "LANG": "C.UTF-8"}
        else:
            full = {"HOME": HANGAR_DIR, "PATH": HANGAR_PATH, "LANG": "C.UTF-8",
                    "TMPDIR": HANGAR_TMP}  # fmt: skip
        exec_id = secrets.token_hex(8)
        header = json.dumps({"argv": list(argv), "env": full, "call": check_env(env or {}),
                             "agent": agent, "timeout": timeout, "id": exec_id,
                             "cwd": cwd or (HOME if agent else HANGAR_DIR)}).encode()  # fmt: skip
        spec_env = self._pending_env.pop(sandbox_id, None)
        if spec_env is not None:
            self.put_file(sandbox_id, ENV_FILE, json.dumps(spec_env).encode(), mode=0o600,
                          user=SandboxUser.HANGAR)  # fmt: skip
        deadline = None if timeout is None else time.monotonic() + timeout
        ws = self._connect(sandbox_id)
        try:
            result, cancelled = self._run(ws, sandbox_id, argv, header, stdin, stdout, stderr,
                                          deadline, timeout, cancel)  # fmt: skip
        except ExecTimeout:
            self._kill(sandbox_id, exec_id)  # in case the pod's own kill did not happen
            raise
        finally:
            ws.close()
        if cancelled:  # the stream is closed: kill the command here, whatever the runtime does
            self._kill(sandbox_id, exec_id)
        return result

    def put_file(self, sandbox_id: str, path: str, data: bytes | BinaryIO, *, mode: int = 0o644,
                 user: SandboxUser = SandboxUser.AGENT) -> None:  # fmt: skip
        """Write a file as ``user`` (parents made), replaced atomically: one streamed exec,
        with the chunked path as its fallback when that exec breaks off
        (:func:`~.files.put_file`)."""
        files.put_file(self.exec, sandbox_id, path, data, mode=mode, user=user)

    def get_file(self, sandbox_id: str, path: str, out: BinaryIO, *,
                 user: SandboxUser = SandboxUser.AGENT) -> int:  # fmt: skip
        """Copy a file's bytes to ``out`` (one exec of ``cat``); SandboxError if missing."""
        counter = CountingWriter(out)
        result = self.exec(sandbox_id, ["cat", "--", path], stdout=cast(BinaryIO, counter),
                           user=user)  # fmt: skip
        if not result.ok:
            message = f"cannot read {path} in sandbox {sandbox_id}: {stderr_tail(result.stderr)}"
            raise SandboxError(message, sandbox_id=sandbox_id, path=path)
        return counter.count

    # -- objects ----------------------------------------------------------------------------

    def _remember(self, sandbox_id: str, lease: datetime) -> None:
        if len(self._leases) >= _POD_CACHE:
            self._leases.clear()  # leases of sandboxes long gone: read the rest again
        self._leases[sandbox_id] = lease

    def _claim(self, sandbox_id: str) -> dict[str, Any]:
        if not _is_ours(sandbox_id):
            raise SandboxNotFound(f"no sandbox {sandbox_id}", sandbox_id=sandbox_id)
        found = self._call(lambda: self._objects.get_namespaced_custom_object(
            objects.EXTENSIONS_GROUP, objects.VERSION, self.namespace, objects.CLAIMS,
            sandbox_id), sandbox_id)  # fmt: skip
        if not _live(found):
            raise SandboxNotFound(f"sandbox {sandbox_id} is being deleted", sandbox_id=sandbox_id)
        return cast(dict[str, Any], found)

    def _connect(self, sandbox_id: str) -> Any:
        """An exec stream to the sandbox's pod. The pod, once found, is remembered: an exec
        costs no read of the claim. A remembered pod that is gone (404) is looked up again,
        once: SandboxNotFound when the claim is gone too. Looking it up costs no request
        when :meth:`status` saw the claim bound, and no read of the Sandbox when its pod has
        its name (as it has unless the Sandbox names another, :func:`~.manifests.pod_name`)."""
        known = self._pods.get(sandbox_id)
        if known is not None:
            try:
                return self._open_exec(sandbox_id, known)
            except SandboxNotFound:
                self._pods.pop(sandbox_id, None)
        name = self._bound.get(sandbox_id) or self._bound_sandbox(sandbox_id)
        try:
            ws = self._open_exec(sandbox_id, name)
            pod = name
        except SandboxNotFound:
            sandbox = self._call(lambda: self._objects.get_namespaced_custom_object(
                objects.AGENTS_GROUP, objects.VERSION, self.namespace, objects.SANDBOXES, name),
                sandbox_id)  # fmt: skip
            pod = objects.pod_name(sandbox)
            if pod == name:  # its pod is gone: so is the sandbox, or it is being replaced
                self._claim(sandbox_id)
                raise
            ws = self._open_exec(sandbox_id, pod)
        if len(self._pods) >= _POD_CACHE:
            self._pods.clear()  # pods of sandboxes long gone: look the rest up again
        self._pods[sandbox_id] = pod
        return ws

    def _bound_sandbox(self, sandbox_id: str) -> str:
        """The name of the Sandbox the claim holds (one read of the claim, remembered)."""
        self._seen(sandbox_id, self._claim(sandbox_id))
        name = self._bound.get(sandbox_id)
        if name is None:
            raise SandboxError(f"sandbox {sandbox_id} is not ready", sandbox_id=sandbox_id)
        return name

    def _call(self, call: Callable[[], Any], sandbox_id: str | None = None) -> Any:
        try:
            return call()
        except vendor_errors() as exc:
            raise translate(exc, sandbox_id) from exc

    # -- exec -------------------------------------------------------------------------------

    def _kill(self, sandbox_id: str, exec_id: str) -> None:
        """Kill exec ``exec_id``'s command if it still runs (:data:`~.podexec.KILL`); best
        effort: a sandbox gone or unreachable has nothing left to kill, or will be destroyed."""
        try:
            self.exec(sandbox_id, ["python3", "-I", "-S", "-c", KILL, exec_id],
                      user=SandboxUser.HANGAR, timeout=30)  # fmt: skip
        except SandboxError as exc:
            logger.warning("cannot kill a cancelled exec in sandbox %s: %s", sandbox_id, exc)

    def _open_exec(self, sandbox_id: str, pod: str) -> Any:
        from kubernetes import client
        from kubernetes.stream import stream, ws_client

        core = client.CoreV1Api(client.ApiClient(self.cfg))  # its own: stream() patches it
        ws = self._call(lambda: stream(
            core.connect_get_namespaced_pod_exec, pod, self.namespace, command=BOOT_ARGV,
            stdin=True, stdout=True, stderr=True, tty=False, _preload_content=False,
            binary=True), sandbox_id)  # fmt: skip
        if hasattr(ws, "_all"):  # the client would keep a second copy of all output there
            ws._all = ws_client._IgnoredIO()
        if ws.subprotocol != ws_client.V5_CHANNEL_PROTOCOL:
            ws.close()
            raise SandboxError(f"the API server offered {ws.subprotocol!r} for exec, not "
                               "v5.channel.k8s.io (needed to close stdin)")  # fmt: skip
        return ws

    def _run(self, ws: Any, sandbox_id: str, argv: Sequence[str], header: bytes,
             stdin: Stdin, stdout: BinaryIO | None, stderr: BinaryIO | None,
             deadline: float | None, timeout: float | None,
             cancel: threading.Event | None) -> tuple[ExecResult, bool]:  # fmt: skip
        """The exec's result once its stream ends, and whether ``cancel`` ended it first."""
        out: list[bytes] = []
        err: list[bytes] = []
        sinks: dict[int, Callable[[bytes], Any]] = {
            1: out.append if stdout is None else stdout.write,
            2: err.append if stderr is None else stderr.write,
        }
        feeder = threading.Thread(target=feed, args=(ws, header, stdin, vendor_errors()),
                                  daemon=True)  # fmt: skip
        feeder.start()
        try:
            while ws.is_open():
                if cancel is not None and cancel.is_set():
                    return ExecResult(137, b"".join(out), b"".join(err)), True
                if deadline is not None and time.monotonic() > deadline + _TIMEOUT_GRACE:
                    ws.close()
                    _timed_out(sandbox_id, argv, timeout)
                ws.update(timeout=_READ_POLL)
                drain(ws, sinks)
            drain(ws, sinks)
            raw = ws.read_channel(3)
        except vendor_errors() as exc:
            raise translate(exc, sandbox_id) from exc
        finally:
            ws.close()
            feeder.join(1.0)
        try:
            code = exit_code(raw, sandbox_id)
        except SandboxError:
            self._claim(sandbox_id)  # SandboxNotFound when the sandbox went away meanwhile
            raise
        if code is None:
            self._claim(sandbox_id)  # SandboxNotFound when the sandbox went away meanwhile
            raise SandboxUnavailable(f"the exec in sandbox {sandbox_id} ended with no status",
                                     sandbox_id=sandbox_id)  # fmt: skip
        if deadline is not None and code == 137 and time.monotonic() >= deadline:
            _timed_out(sandbox_id, argv, timeout)
        return ExecResult(code, b"".join(out), b"".join(err)), False


def _timed_out(sandbox_id: str, argv: Sequence[str], timeout: float | None) -> NoReturn:
    raise ExecTimeout(f"{argv[0]} timed out after {timeout} s in sandbox {sandbox_id}",
                      sandbox_id=sandbox_id, argv=list(argv), timeout=timeout)  # fmt: skip


# -- small pieces --------------------------------------------------------------------------


def _whole_second(when: datetime) -> datetime:
    """``when`` rounded up to a whole second (a ``metav1.Time`` has no finer part)."""
    return when.replace(microsecond=0) + timedelta(seconds=1 if when.microsecond else 0)


def _is_ours(sandbox_id: str) -> bool:
    return sandbox_id.startswith("hangar-") and len(sandbox_id) == 15


def _live(obj: Mapping[str, Any]) -> bool:
    return not (obj.get("metadata") or {}).get("deletionTimestamp")


def _info(obj: Mapping[str, Any]) -> SandboxInfo:
    return SandboxInfo(id=str(obj["metadata"]["name"]), labels=objects.user_labels(obj),
                       created_at=objects.created_at(obj))  # fmt: skip




