"""The stand-in's controller: one thread doing what the Agent Sandbox controllers do.

Each pass reconciles every object and is idempotent (a pass that finds nothing to do writes
nothing); passes run when the store changes, or at the next deadline (a pod due Ready, a
shutdown time), waiting at most ``tick`` seconds otherwise.

- A SandboxWarmPool keeps ``spec.replicas`` Sandboxes it owns (label
  ``agents.x-k8s.io/warm-pool-sandbox: POOL``), made from its SandboxTemplate; status
  ``replicas``, ``readyReplicas``, ``selector``. Repointed (``sandboxTemplateRef`` changed)
  under ``updateStrategy`` Recreate, its sandboxes of another template are deleted at once and
  replaced; under OnReplenish (the default) they stay until claimed or deleted.
- A Sandbox has one Pod (named after it, or its ``agents.x-k8s.io/pod-name`` annotation),
  owned by it, labelled ``agents.x-k8s.io/launch-type`` ``warm`` (made for a pool) or ``cold``;
  the Sandbox's Ready condition follows the pod's (``DependenciesReady`` or
  ``DependenciesNotReady`` with the pod's reason). Past ``spec.shutdownTime`` it is deleted.
- A SandboxClaim adopts the oldest Ready sandbox of its pool (ownership moves to the claim,
  ``additionalPodMetadata`` goes on the pod, the pool refills), or cold-creates a Sandbox named
  after the claim when none is Ready or the claim sets ``env`` or ``volumeClaimTemplates``
  (``env`` needs the template's ``envVarsInjectionPolicy`` Allowed or Overrides, else Ready
  False ``EnvVarsInjectionRejected``). Its Ready condition forwards the Sandbox's. Past
  ``lifecycle.shutdownTime`` its sandbox is deleted (Ready False ``ClaimExpired``), and the
  claim too under shutdownPolicy Delete or DeleteForeground (default Retain).
- Each pod gets the core/v1 Events a real cluster records as it starts (:func:`.pods.start_events`,
  worded in :mod:`.events`), each recorded once, in order, named ``POD.<16 hex>``.
- Deleting a claim deletes its sandbox and pod (owner references, in the store); events stay,
  as on a cluster until their time to live.
- ``on_pod_created(pod)`` / ``on_pod_deleted(pod)`` are called for every pod added to or
  deleted from the store (from the thread that changed it); exceptions they raise are logged.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from . import kinds
from .events import KUBELET, NODE, Said
from .pods import (
    LAUNCH_TYPE,
    POD_NAME,
    Knobs,
    condition,
    not_ready_reason,
    pod_status,
    ready,
    start_events,
)
from .store import Event, Obj, Store, StoreError, now

logger = logging.getLogger(__name__)
POOL_LABEL = "agents.x-k8s.io/warm-pool-sandbox"
TEMPLATE_REF = "agents.x-k8s.io/sandbox-template-ref"
PodHook = Callable[[Obj], None]
SB, POD, CLAIM, POOL, TPL, EV = (k.resource for k in (kinds.SANDBOXES, kinds.PODS, kinds.CLAIMS,
                                                      kinds.WARM_POOLS, kinds.TEMPLATES,
                                                      kinds.EVENTS))  # fmt: skip


def _owner(kind: kinds.Kind, obj: Obj) -> Obj:
    return {"apiVersion": kind.api_version, "kind": kind.kind, "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}  # fmt: skip


def _owned_by(obj: Obj, owner: Obj) -> bool:
    refs = obj["metadata"].get("ownerReferences") or []
    return any(r.get("uid") == owner["metadata"]["uid"] for r in refs)


def _template_of(sandbox: Obj) -> str | None:
    return (sandbox["metadata"].get("annotations") or {}).get(TEMPLATE_REF)


def _past(stamp: object) -> float | None:
    """Seconds since ``stamp`` (RFC 3339), negative when in the future; None when unset."""
    if not isinstance(stamp, str) or not stamp:
        return None
    when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return (datetime.now(UTC) - when).total_seconds()


class Controller:
    """Reconciles the store in a daemon thread between :meth:`start` and :meth:`stop`."""

    def __init__(self, store: Store, knobs: Knobs | None = None, *, tick: float = 1.0,
                 on_pod_created: PodHook | None = None,
                 on_pod_deleted: PodHook | None = None) -> None:  # fmt: skip
        self.store = store
        self.knobs = knobs or Knobs()
        self.tick = tick
        self.on_pod_created = on_pod_created
        self.on_pod_deleted = on_pod_deleted
        self._born: dict[str, float] = {}  # pod uid -> monotonic creation time
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._next_ip = 2
        self._said: dict[str, set[tuple[str, str]]] = {}  # pod uid -> (reason, message) recorded
        self._events = 0
        store.subscribe(self._on_event)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="kube-controller", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        with self.store.changed:
            self.store.changed.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def poke(self) -> None:
        """Run a pass soon (after a knob changed)."""
        with self.store.changed:
            self.store.changed.notify_all()

    def _on_event(self, event: Event) -> None:
        if event.resource != POD:
            return
        hook = self.on_pod_created if event.type == "ADDED" else None
        hook = self.on_pod_deleted if event.type == "DELETED" else hook
        if event.type == "ADDED":
            self._born[event.obj["metadata"]["uid"]] = time.monotonic()
        if event.type == "DELETED":
            self._said.pop(event.obj["metadata"]["uid"], None)
        if hook is not None:
            try:
                hook(event.obj)
            except Exception:  # a hook's failure must not break the request that made the pod
                logger.exception("pod hook failed for %s", event.obj["metadata"].get("name"))

    def _run(self) -> None:
        while not self._stop.is_set():
            seen = self.store.resource_version
            try:
                wait = self.reconcile()
            except StoreError as exc:  # a race with a client's write: look again at once
                logger.debug("reconcile raced: %s", exc.message)
                self._stop.wait(0.01)
                continue
            with self.store.changed:
                if self.store.resource_version == seen and not self._stop.is_set():
                    self.store.changed.wait(min(wait, self.tick))

    # -- one pass -------------------------------------------------------------------------

    def reconcile(self) -> float:
        """One pass over everything; returns seconds until the next known deadline."""
        wait = self.tick
        self.store.collect_garbage()
        for pool in self.store.list(POOL, None)[0]:
            self._pool(pool)
        for claim in self.store.list(CLAIM, None)[0]:
            wait = min(wait, self._claim(claim))
        for sandbox in self.store.list(SB, None)[0]:
            wait = min(wait, self._sandbox(sandbox))
        return max(wait, 0.01)

    def _pool(self, pool: Obj) -> None:
        ns, name = pool["metadata"]["namespace"], pool["metadata"]["name"]
        owned = [s for s in self.store.list(SB, ns)[0] if _owned_by(s, pool)]
        want = int(pool.get("spec", {}).get("replicas") or 0)
        template_name = pool["spec"].get("sandboxTemplateRef", {}).get("name", "")
        template = self.store.find(TPL, ns, template_name)
        strategy = (pool["spec"].get("updateStrategy") or {}).get("type") or "OnReplenish"
        if strategy == "Recreate":  # repointed: its unclaimed sandboxes of another template go
            for sandbox in [s for s in owned if _template_of(s) != template_name]:
                self.store.delete(SB, ns, sandbox["metadata"]["name"])
                owned.remove(sandbox)
        if template is not None:
            for _ in range(want - len(owned)):
                meta = {"generateName": f"{name}-", "labels": {POOL_LABEL: name}}
                sandbox = self._sandbox_doc(template, meta, _owner(kinds.WARM_POOLS, pool))
                owned.append(self.store.create(SB, ns, sandbox))
        extra = sorted(owned, key=lambda s: (ready(s), s["metadata"]["creationTimestamp"]))
        for sandbox in extra[: max(len(owned) - want, 0)]:
            self.store.delete(SB, ns, sandbox["metadata"]["name"])
            owned.remove(sandbox)
        status = {"replicas": len(owned), "readyReplicas": sum(ready(s) for s in owned),
                  "selector": f"{POOL_LABEL}={name}",
                  "observedGeneration": pool["metadata"].get("generation", 1)}  # fmt: skip
        self.store.update(POOL, ns, name, lambda p: {**p, "status": status})

    def _sandbox_doc(self, template: Obj, meta: Obj, owner: Obj, claim: Obj | None = None) -> Obj:
        spec = {"podTemplate": template["spec"]["podTemplate"]}
        vcts = template["spec"].get("volumeClaimTemplates") or []
        if claim is not None:
            vcts = vcts + (claim["spec"].get("volumeClaimTemplates") or [])
            env = claim["spec"].get("env") or []
            for c in spec["podTemplate"].get("spec", {}).get("containers") or []:
                extra = [{"name": e["name"], "value": e["value"]} for e in env
                         if e.get("containerName") in (None, "", c.get("name"))]  # fmt: skip
                c["env"] = [e for e in c.get("env") or [] if e["name"] not in
                            {x["name"] for x in extra}] + extra  # fmt: skip
        if vcts:
            spec["volumeClaimTemplates"] = vcts
        annotations = {TEMPLATE_REF: template["metadata"]["name"]}
        meta = {**meta, "annotations": annotations, "ownerReferences": [owner]}
        return {"apiVersion": kinds.SANDBOXES.api_version, "kind": "Sandbox",
                "metadata": meta, "spec": spec}  # fmt: skip

    def _sandbox(self, sandbox: Obj) -> float:
        meta = sandbox["metadata"]
        ns, name = meta["namespace"], meta["name"]
        left = _past(sandbox["spec"].get("shutdownTime"))
        if left is not None and left >= 0:
            self.store.delete(SB, ns, name)
            return self.tick
        pod_name = (meta.get("annotations") or {}).get(POD_NAME) or name
        pod = self.store.find(POD, ns, pod_name)
        wait = self.tick if left is None else -left
        if pod is None:
            pod = self.store.create(POD, ns, self._pod_doc(sandbox, pod_name))
        age = time.monotonic() - self._born.get(pod["metadata"]["uid"], time.monotonic())
        ip = (pod.get("status") or {}).get("podIP") or f"10.4.0.{self._next_ip % 250 + 2}"
        status = pod_status(pod, self.knobs, age, ip)
        if status != pod.get("status"):
            self._next_ip += status.get("podIP") == ip
            pod = self.store.update(POD, ns, pod_name, lambda p: {**p, "status": status})
        self._record(pod, start_events(pod, self.knobs))
        if ready(pod):
            cond = ("True", "DependenciesReady", "Pod is Ready")
        else:
            cond = ("False", "DependenciesNotReady", not_ready_reason(pod) or "Pod is not Ready")
            if age < self.knobs.ready_delay:  # else only a knob change (a poke) moves it
                wait = min(wait, self.knobs.ready_delay - age)
        ips = [p["ip"] for p in pod.get("status", {}).get("podIPs") or []]

        def change(s: Obj) -> Obj:
            st = dict(s.get("status") or {})
            st["conditions"] = condition(st.get("conditions") or [], "Ready", *cond)
            st.update(podIPs=ips) if ips else st.pop("podIPs", None)
            return {**s, "status": st}

        self.store.update(SB, ns, name, change)
        return wait

    def _record(self, pod: Obj, said: list[Said]) -> None:
        """Record on ``pod`` each of ``said`` it does not carry yet, in order (a real cluster
        would count a repeat; the stand-in records each once)."""
        meta = pod["metadata"]
        done = self._said.setdefault(meta["uid"], set())
        for event in said:
            if (event.reason, event.message) in done:
                continue
            done.add((event.reason, event.message))
            self._events += 1
            stamp = now()
            host = {"host": NODE} if event.component == KUBELET else {}
            doc = {"apiVersion": "v1", "kind": "Event",
                   "metadata": {"name": f"{meta['name']}.{self._events:016x}"},
                   "involvedObject": {"kind": "Pod", "namespace": meta["namespace"],
                                      "name": meta["name"], "uid": meta["uid"], "apiVersion": "v1",
                                      "resourceVersion": meta.get("resourceVersion", "")},
                   "reason": event.reason, "message": event.message, "type": event.type,
                   "source": {"component": event.component, **host},
                   "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
                   "reportingComponent": event.component, "reportingInstance": ""}  # fmt: skip
            self.store.create(EV, meta["namespace"], doc)

    def _pod_doc(self, sandbox: Obj, pod_name: str) -> Obj:
        template = sandbox["spec"]["podTemplate"]
        owners = sandbox["metadata"].get("ownerReferences") or []
        warm = any(o.get("kind") == "SandboxWarmPool" for o in owners)
        pod_meta = template.get("metadata") or {}
        labels = {**(pod_meta.get("labels") or {}), LAUNCH_TYPE: "warm" if warm else "cold",
                  "agents.x-k8s.io/sandbox-name": sandbox["metadata"]["name"]}  # fmt: skip
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": pod_name, "labels": labels,
                             "annotations": dict(pod_meta.get("annotations") or {}),
                             "ownerReferences": [_owner(kinds.SANDBOXES, sandbox)]},
                "spec": template.get("spec") or {},
                "status": {"phase": "Pending", "conditions": []}}  # fmt: skip

    # -- claims ---------------------------------------------------------------------------

    def _claim(self, claim: Obj) -> float:
        meta, spec = claim["metadata"], claim["spec"]
        ns, name = meta["namespace"], meta["name"]
        bound = (claim.get("status") or {}).get("sandbox", {}).get("name")
        lifecycle = spec.get("lifecycle") or {}
        left = _past(lifecycle.get("shutdownTime"))
        if left is not None and left >= 0:
            if bound and (sb := self.store.find(SB, ns, bound)) is not None and _owned_by(sb, claim):
                self.store.delete(SB, ns, bound)
            if lifecycle.get("shutdownPolicy") in ("Delete", "DeleteForeground"):
                self.store.delete(CLAIM, ns, name)
                return self.tick
            self._claim_status(claim, bound, ("False", "ClaimExpired",
                                              "Claim expired. Sandbox cleanup initiated."))
            return self.tick
        wait = self.tick if left is None else -left
        if not bound:
            bound = self._bind(claim)
            if bound is None:
                return wait
        sandbox = self.store.find(SB, ns, bound)
        if sandbox is None:
            cond = ("False", "SandboxMissing", "Sandbox does not exist")
        else:
            sb_ready = next((c for c in sandbox.get("status", {}).get("conditions") or []
                             if c.get("type") == "Ready"), None)  # fmt: skip
            cond = ((sb_ready["status"], sb_ready["reason"], sb_ready.get("message", ""))
                    if sb_ready else ("False", "SandboxNotReady", "Sandbox is not ready"))  # fmt: skip
        self._claim_status(claim, bound, cond, (sandbox or {}).get("status", {}).get("podIPs"))
        return wait

    def _claim_status(self, claim: Obj, bound: str | None, cond: tuple[str, str, str],
                      ips: list[str] | None = None) -> None:  # fmt: skip
        def change(c: Obj) -> Obj:
            st = dict(c.get("status") or {})
            st["conditions"] = condition(st.get("conditions") or [], "Ready", *cond)
            if bound:
                st["sandbox"] = {"name": bound, **({"podIPs": ips} if ips else {})}
            return {**c, "status": st}

        self.store.update(CLAIM, claim["metadata"]["namespace"], claim["metadata"]["name"], change)

    def _bind(self, claim: Obj) -> str | None:
        """Adopt a ready pool sandbox or cold-create one; the bound sandbox's name, or None
        (with the claim's Ready condition saying why) when neither can happen yet."""
        meta, spec = claim["metadata"], claim["spec"]
        ns = meta["namespace"]
        pool = self.store.find(POOL, ns, spec["warmPoolRef"]["name"])
        if pool is None:
            msg = f'SandboxWarmPool "{spec["warmPoolRef"]["name"]}" not found'
            self._claim_status(claim, None, ("False", "WarmPoolNotFound", msg))
            return None
        tpl_name = pool["spec"].get("sandboxTemplateRef", {}).get("name", "")
        template = self.store.find(TPL, ns, tpl_name)
        if template is None:
            msg = f'SandboxTemplate "{tpl_name}" not found'
            self._claim_status(claim, None, ("False", "TemplateNotFound", msg))
            return None
        policy = template["spec"].get("envVarsInjectionPolicy") or "Disallowed"
        if spec.get("env") and policy == "Disallowed":
            msg = "the template's envVarsInjectionPolicy is Disallowed"
            self._claim_status(claim, None, ("False", "EnvVarsInjectionRejected", msg))
            return None
        extra = spec.get("additionalPodMetadata") or {}
        if not spec.get("env") and not spec.get("volumeClaimTemplates"):
            candidates = sorted((s for s in self.store.list(SB, ns)[0]
                                 if _owned_by(s, pool) and ready(s)),
                                key=lambda s: int(s["metadata"]["resourceVersion"]))  # fmt: skip
            if candidates:
                return self._adopt(claim, candidates[0], extra)
        name: str = meta["name"]
        sandbox = self._sandbox_doc(template, {"name": name}, _owner(kinds.CLAIMS, claim), claim)
        pod_meta = sandbox["spec"]["podTemplate"].setdefault("metadata", {})
        for key in ("labels", "annotations"):
            pod_meta[key] = {**(pod_meta.get(key) or {}), **(extra.get(key) or {})}
        if self.store.find(SB, ns, name) is None:
            self.store.create(SB, ns, sandbox)
        self._claim_status(claim, name, ("False", "SandboxNotReady", "Sandbox is not ready"))
        return name

    def _adopt(self, claim: Obj, sandbox: Obj, extra: Obj) -> str:
        ns: str = sandbox["metadata"]["namespace"]
        name: str = sandbox["metadata"]["name"]

        def take(s: Obj) -> Obj:
            s["metadata"]["ownerReferences"] = [_owner(kinds.CLAIMS, claim)]
            (s["metadata"].get("labels") or {}).pop(POOL_LABEL, None)
            return s

        self.store.update(SB, ns, name, take)
        pod_name = (sandbox["metadata"].get("annotations") or {}).get(POD_NAME) or name

        def label(p: Obj) -> Obj:
            for key in ("labels", "annotations"):
                p["metadata"][key] = {**(p["metadata"].get(key) or {}), **(extra.get(key) or {})}
            return p

        if self.store.find(POD, ns, pod_name) is not None:
            self.store.update(POD, ns, pod_name, label)
        self._claim_status(claim, name, ("True", "DependenciesReady", "Pod is Ready"))
        return name
