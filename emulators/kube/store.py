"""The stand-in's object store: every object of every kind, one resourceVersion counter, a
bounded event history for watches, and owner-reference garbage collection.

Contracts:

- Every mutation takes the next value of one counter as the object's ``resourceVersion``, so
  resourceVersions order all events of the server (they are decimal strings on the wire).
- The history keeps the last ``history`` events. A watch from a resourceVersion older than the
  oldest retained event (that is, events were dropped after it) is *expired*
  (:class:`Expired`), as etcd compaction makes it on a real cluster.
- Deleting an object deletes, in the same call, every object whose ``ownerReferences`` names
  its uid (background cascade, depth first), each with its own DELETED event;
  :meth:`Store.collect_garbage` deletes objects created for an owner already gone.
- Objects are JSON-shaped dicts; the store hands out deep copies, never its own.
- Listeners (``subscribe``) are called after each mutation, outside the lock, in event order
  per calling thread; they may call back into the store.
"""

from __future__ import annotations

import builtins
import copy
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

Obj = dict[str, Any]
Key = tuple[str, str, str]  # (resource, namespace, name); resource is "group/version/plural"


class StoreError(Exception):
    """A refused request, answered as a Kubernetes Status with this ``code`` and ``reason``."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message


class Expired(StoreError):
    """A watch or list from a resourceVersion the history no longer holds (410 Gone)."""

    def __init__(self, rv: int, oldest: int) -> None:
        super().__init__(410, "Expired", f"too old resource version: {rv} ({oldest})")


@dataclass(frozen=True)
class Event:
    """One change: ``type`` ADDED, MODIFIED or DELETED, the object as it then was."""

    rv: int
    type: str
    resource: str
    obj: Obj


def now() -> str:
    """The time as Kubernetes writes it (RFC 3339, seconds, UTC)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _meta(obj: Obj) -> Obj:
    meta: Obj = obj.setdefault("metadata", {})
    return meta


class Store:
    """Objects of every kind, keyed by ``(resource, namespace, name)`` (namespace ``""`` for
    cluster-scoped kinds). Thread-safe; ``changed`` is notified on every mutation."""

    def __init__(self, history: int = 1000) -> None:
        self._objects: dict[Key, Obj] = {}
        self._events: deque[Event] = deque()
        self._history = history
        self._rv = 0
        self._dropped_up_to = 0  # events with rv <= this are gone from the history
        self.changed = threading.Condition()
        self._listeners: list[Callable[[Event], None]] = []

    # -- counters and history -------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        with self.changed:
            return self._rv

    def set_history(self, history: int) -> None:
        """Keep at most ``history`` events from now on (dropping the oldest at once)."""
        with self.changed:
            self._history = history
            self._trim()

    def compact(self) -> None:
        """Drop the whole history, so every resourceVersion before now is expired."""
        with self.changed:
            if self._events:
                self._dropped_up_to = self._events[-1].rv
            self._events.clear()

    def subscribe(self, listener: Callable[[Event], None]) -> None:
        """Call ``listener(event)`` after every mutation (outside the store's lock)."""
        self._listeners.append(listener)

    def _trim(self) -> None:
        while len(self._events) > self._history:
            self._dropped_up_to = self._events.popleft().rv

    def _record(self, kind: str, resource: str, obj: Obj) -> Event:
        self._rv += 1
        _meta(obj)["resourceVersion"] = str(self._rv)
        event = Event(self._rv, kind, resource, copy.deepcopy(obj))
        self._events.append(event)
        self._trim()
        self.changed.notify_all()
        return event

    def _publish(self, events: builtins.list[Event]) -> None:
        for event in events:
            for listener in list(self._listeners):
                listener(event)

    # -- reads ----------------------------------------------------------------------------

    def get(self, resource: str, namespace: str, name: str) -> Obj:
        """The object, or StoreError 404 NotFound."""
        with self.changed:
            obj = self._objects.get((resource, namespace, name))
            if obj is None:
                plural = resource.rsplit("/", 1)[-1]
                raise StoreError(404, "NotFound", f'{plural} "{name}" not found')
            return copy.deepcopy(obj)

    def find(self, resource: str, namespace: str, name: str) -> Obj | None:
        """The object, or None."""
        with self.changed:
            obj = self._objects.get((resource, namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def list(
        self, resource: str, namespace: str | None, match: Callable[[Obj], bool] | None = None
    ) -> tuple[builtins.list[Obj], int]:
        """The objects of ``resource`` (in ``namespace``, or all when None) that ``match``
        accepts, sorted by namespace and name, and the resourceVersion they were read at."""
        with self.changed:
            items = [
                copy.deepcopy(obj)
                for (res, ns, _), obj in sorted(self._objects.items())
                if res == resource and (namespace is None or ns == namespace)
                and (match is None or match(obj))
            ]  # fmt: skip
            return items, self._rv

    # -- writes ---------------------------------------------------------------------------

    def create(self, resource: str, namespace: str, obj: Obj) -> Obj:
        """Store a new object: fills uid, creationTimestamp, generation and namespace; raises
        StoreError 409 AlreadyExists when the name is taken."""
        meta = _meta(obj)
        name = meta.get("name") or ""
        if not name and meta.get("generateName"):
            name = meta["generateName"] + uuid.uuid4().hex[:5]
        if not name:
            raise StoreError(422, "Invalid", "metadata.name: Required value: name is required")
        key = (resource, namespace, name)
        with self.changed:
            if key in self._objects:
                plural = resource.rsplit("/", 1)[-1]
                raise StoreError(409, "AlreadyExists", f'{plural} "{name}" already exists')
            meta.update(name=name, uid=str(uuid.uuid4()), creationTimestamp=now(), generation=1)
            if namespace:
                meta["namespace"] = namespace
            for drop in ("deletionTimestamp", "resourceVersion"):
                meta.pop(drop, None)
            event = self._record("ADDED", resource, obj)
            self._objects[key] = obj
            out = copy.deepcopy(obj)
        self._publish([event])
        return out

    def update(self, resource: str, namespace: str, name: str, change: Callable[[Obj], Obj]) -> Obj:
        """Replace the object with ``change(copy)`` under the lock (read-modify-write). A new
        object whose ``metadata.resourceVersion`` is set and differs from the stored one raises
        StoreError 409 Conflict; identity fields (uid, creationTimestamp) are kept. No change
        at all records no event. A changed spec bumps ``metadata.generation``."""
        with self.changed:
            key = (resource, namespace, name)
            old = self._objects.get(key)
            if old is None:
                plural = resource.rsplit("/", 1)[-1]
                raise StoreError(404, "NotFound", f'{plural} "{name}" not found')
            new = change(copy.deepcopy(old))
            meta = _meta(new)
            sent_rv = meta.get("resourceVersion")
            if sent_rv not in (None, "", old["metadata"]["resourceVersion"]):
                raise StoreError(
                    409, "Conflict",
                    f'Operation cannot be fulfilled on {resource.rsplit("/", 1)[-1]} "{name}": '
                    "the object has been modified; please apply your changes to the latest "
                    "version and try again",
                )  # fmt: skip
            for keep in ("uid", "creationTimestamp", "name", "namespace", "generation"):
                if keep in old["metadata"]:
                    meta[keep] = old["metadata"][keep]
            meta["resourceVersion"] = old["metadata"]["resourceVersion"]
            if new == old:
                return copy.deepcopy(old)
            if new.get("spec") != old.get("spec"):
                meta["generation"] = int(old["metadata"].get("generation", 1)) + 1
            event = self._record("MODIFIED", resource, new)
            self._objects[key] = new
            out = copy.deepcopy(new)
        self._publish([event])
        return out

    def delete(self, resource: str, namespace: str, name: str) -> Obj:
        """Delete the object and, first, everything it owns (recursively); returns the object
        as deleted (with ``deletionTimestamp``). StoreError 404 when absent."""
        with self.changed:
            key = (resource, namespace, name)
            if key not in self._objects:
                plural = resource.rsplit("/", 1)[-1]
                raise StoreError(404, "NotFound", f'{plural} "{name}" not found')
            events: builtins.list[Event] = []
            out = self._delete_locked(key, events)
        self._publish(events)
        return out

    def collect_garbage(self) -> int:
        """Delete every object whose owners (all of its ``ownerReferences``) are gone, as the
        garbage collector does for an owner deleted while its dependent was being made;
        returns how many were deleted."""
        with self.changed:
            uids = {o["metadata"]["uid"] for o in self._objects.values()}
            orphans = [
                key for key, obj in self._objects.items()
                if (refs := obj["metadata"].get("ownerReferences"))
                and not any(r.get("uid") in uids for r in refs)
            ]  # fmt: skip
            events: builtins.list[Event] = []
            for key in orphans:
                if key in self._objects:
                    self._delete_locked(key, events)
        self._publish(events)
        return len(orphans)

    def _delete_locked(self, key: Key, events: builtins.list[Event]) -> Obj:
        obj = self._objects.pop(key)
        uid = obj["metadata"]["uid"]
        for dep_key, dep in list(self._objects.items()):
            owners = dep.get("metadata", {}).get("ownerReferences") or []
            if dep_key in self._objects and any(o.get("uid") == uid for o in owners):
                self._delete_locked(dep_key, events)
        obj["metadata"]["deletionTimestamp"] = now()
        events.append(self._record("DELETED", key[0], obj))
        return copy.deepcopy(obj)

    # -- watches --------------------------------------------------------------------------

    def events_after(self, rv: int) -> builtins.list[Event]:
        """Events with resourceVersion greater than ``rv``, oldest first; raises Expired when
        some of them have been dropped from the history."""
        with self.changed:
            return self._events_after_locked(rv)

    def _events_after_locked(self, rv: int) -> builtins.list[Event]:
        if rv < self._dropped_up_to:
            raise Expired(rv, self._dropped_up_to + 1)
        return [e for e in self._events if e.rv > rv]

    def wait_events(self, rv: int, timeout: float) -> builtins.list[Event]:
        """Events after ``rv``, waiting up to ``timeout`` seconds for at least one (an empty
        list when none came). Raises Expired as :meth:`events_after`."""
        with self.changed:
            events = self._events_after_locked(rv)
            if not events and timeout > 0:
                self.changed.wait(timeout)
                events = self._events_after_locked(rv)
            return events

    def stream(self, rv: int, stop: Callable[[], bool], tick: float = 0.5) -> Iterator[Event]:
        """Every event after ``rv`` as it happens, until ``stop()`` is true (checked at least
        every ``tick`` seconds). Raises Expired first when ``rv`` is too old."""
        last = rv
        while not stop():
            for event in self.wait_events(last, tick):
                last = event.rv
                yield event
