"""Pods backed by real sandboxes: :class:`PodSandboxes`, the stand-in's pod hooks when it is
given a sandbox backend (``KubeStandIn(sandboxes=...)``).

- :meth:`PodSandboxes.created` (the controller's ``on_pod_created``) makes one sandbox per pod,
  labelled :data:`NAMESPACE`, :data:`POD` and :data:`UID` (a :class:`SandboxSpec` with no
  ``ro_paths`` and no ``host_ports``: a pod reaches nothing of the host). It runs on the
  controller's thread before the pod's first status, so the pod turns Ready only once its
  sandbox exists. A sandbox that cannot be made is logged (the pod still turns Ready, and its
  exec answers 404, as for a pod that has no sandbox).
- :meth:`PodSandboxes.deleted` (``on_pod_deleted``) destroys the pod's sandbox, on the thread
  that deleted the pod, before that delete returns. A pod deleted while its sandbox is being
  made gets it destroyed as soon as it is made.
- :meth:`PodSandboxes.resolve` is the exec helper's ``resolve``: (namespace, pod name) to the
  backend and the sandbox id of the pod of that name now in the store; NotFound otherwise.
- :meth:`PodSandboxes.close` destroys every sandbox made and not yet destroyed; a sandbox
  finished after it is destroyed at once.

Sandboxes are keyed by pod uid, so a pod deleted and made again under the same name never
reaches the old pod's sandbox.

**Services.** A pod on a cluster reaches the cluster's Services (a model server, a git
server, a storage endpoint) at addresses the cluster routes; a pod here reaches nothing of the
host but the host loopback ports listed in :attr:`PodSandboxes.services`, each at the same
address inside the pod, ``127.0.0.1:PORT`` (the local backend's relay, which this stand-in
uses to play a cluster's routing; hangar's ``gke://`` backend never asks for host ports). So
a URL such as ``http://127.0.0.1:PORT`` means the same service to the control plane and to
every pod. The list is read when a pod is made: a change reaches pods made after it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from hangar.errors import HangarError, NotFound
from hangar.sandboxes import Sandboxes, SandboxSpec

from . import kinds
from .store import Obj, Store

logger = logging.getLogger(__name__)
NAMESPACE, POD, UID = "kube.namespace", "kube.pod", "kube.uid"
"""The labels of a pod's sandbox: its namespace, its name and its uid."""


class PodSandboxes:
    """One sandbox of ``sandboxes`` per pod of ``store`` (the module's contract)."""

    def __init__(self, sandboxes: Sandboxes, store: Store, services: Iterable[int] = ()) -> None:
        self.sandboxes = sandboxes
        self.store = store
        self.services: tuple[int, ...] = tuple(sorted(set(services)))
        self._lock = threading.Lock()
        self._made: dict[str, str] = {}  # pod uid -> sandbox id
        self._pending: set[str] = set()  # pod uids whose sandbox is being made
        self._gone: set[str] = set()  # pending pod uids deleted meanwhile
        self._closed = False

    def created(self, pod: Obj) -> None:
        """Make the pod's sandbox (the ``on_pod_created`` hook)."""
        meta = pod["metadata"]
        uid = meta["uid"]
        with self._lock:
            if self._closed:
                return
            self._pending.add(uid)
        labels = {NAMESPACE: meta.get("namespace", ""), POD: meta["name"], UID: uid}
        try:
            spec = SandboxSpec(labels=labels, host_ports=self.services)
            sandbox_id: str | None = self.sandboxes.create(spec).id
        except HangarError:
            logger.exception("no sandbox for pod %s/%s", labels[NAMESPACE], labels[POD])
            sandbox_id = None
        with self._lock:
            self._pending.discard(uid)
            orphan = uid in self._gone or self._closed
            self._gone.discard(uid)
            if sandbox_id is not None and not orphan:
                self._made[uid] = sandbox_id
                return
        if sandbox_id is not None:
            self.sandboxes.destroy(sandbox_id)

    def deleted(self, pod: Obj) -> None:
        """Destroy the pod's sandbox (the ``on_pod_deleted`` hook)."""
        uid = pod["metadata"]["uid"]
        with self._lock:
            sandbox_id = self._made.pop(uid, None)
            if sandbox_id is None and uid in self._pending:
                self._gone.add(uid)
        if sandbox_id is not None:
            self.sandboxes.destroy(sandbox_id)

    def sandbox_id(self, namespace: str, name: str) -> str | None:
        """The sandbox id of pod ``namespace/name`` as it is now, or None."""
        pod = self.store.find(kinds.PODS.resource, namespace, name)
        if pod is None:
            return None
        with self._lock:
            return self._made.get(pod["metadata"]["uid"])

    def resolve(self, namespace: str, name: str) -> tuple[Sandboxes, str]:
        """The exec helper's ``resolve``; NotFound for a pod that is not there or has no
        sandbox."""
        sandbox_id = self.sandbox_id(namespace, name)
        if sandbox_id is None:
            raise NotFound(f"pod {namespace}/{name} has no sandbox")
        return self.sandboxes, sandbox_id

    def close(self) -> None:
        """Destroy every sandbox made; later ones are destroyed as they are made."""
        with self._lock:
            self._closed = True
            made, self._made = list(self._made.values()), {}
        for sandbox_id in made:
            self.sandboxes.destroy(sandbox_id)
