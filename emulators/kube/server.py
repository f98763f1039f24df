"""The stand-in's HTTP front: the Kubernetes REST paths the official client calls.

- Core v1 ``events`` (namespaced; list and watch with a ``fieldSelector`` on
  ``involvedObject.name``, ``involvedObject.kind`` and the other Event field labels).
- Discovery: ``/version``, ``/api``, ``/api/v1``, ``/apis``, ``/apis/GROUP/VERSION``.
- Resources: ``/api/v1[/namespaces/NS]/PLURAL[/NAME[/SUB]]`` and
  ``/apis/GROUP/VERSION[/namespaces/NS]/PLURAL[/NAME[/SUB]]`` with GET (get, list, watch),
  POST (create), PUT (replace), PATCH (merge, strategic-as-merge, JSON patch), DELETE; the
  ``status`` subresource and the warm pool's ``scale`` (``autoscaling/v1`` Scale).
  Deleting a namespace deletes everything in it first.
- Every request needs ``Authorization: Bearer TOKEN`` (else 401); every error is a
  Kubernetes ``Status`` so the client raises ``ApiException`` with its code.
- Writes are checked strictly (:mod:`.kinds`): an unknown field is 400 BadRequest
  ``strict decoding error``, a missing or bad value 422 Invalid.
- Watches (``?watch=1``) stream one JSON event per line until ``timeoutSeconds`` or shutdown;
  an expired ``resourceVersion`` answers one ERROR event carrying a 410 Expired Status.
- ``pods/NAME/exec`` is delegated to ``server.exec_handler`` when set, else 501.
- ``authorization.k8s.io/v1 selfsubjectaccessreviews`` (create): allowed, unless the ``denied``
  knob names the verb and resource; never stored.
- ``GET``/``PUT /_stand-in/knobs`` read and change the controller's knobs (JSON); knob
  ``agent_sandbox`` false hides the Agent Sandbox groups (discovery and paths answer 404).
"""

from __future__ import annotations

import hmac
import json
import re
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from . import kinds
from .kinds import Kind
from .store import Expired, Obj, Store, StoreError
from .wire import apply_patch, selector, status_doc

_CORE = re.compile(
    r"^/api/v1(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[^/]+)(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?$"
)
_GROUP = re.compile(
    r"^/apis/(?P<group>[^/]+)/(?P<version>[^/]+)(?:/namespaces/(?P<ns>[^/]+))?"
    r"/(?P<plural>[^/]+)(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?$"
)
ExecHandler = Callable[[BaseHTTPRequestHandler, str, str], None]


class KubeServer(ThreadingHTTPServer):
    """The bound server: the store, the bearer token, knobs access and an exec hook."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], store: Store, token: str, *,
                 knobs: Callable[[dict[str, Any] | None], dict[str, Any]] | None = None,
                 verbose: bool = False) -> None:  # fmt: skip
        super().__init__(address, _Handler)
        self.store = store
        self.token = token
        self.knobs = knobs
        self.verbose = verbose
        self.exec_handler: ExecHandler | None = None
        self.stopping = threading.Event()
        self.requests = 0
        """How many authenticated requests have been served (benches count API requests)."""
        self.count_lock = threading.Lock()

    def shutdown(self) -> None:
        self.stopping.set()
        super().shutdown()


class _Handler(BaseHTTPRequestHandler):
    server: KubeServer
    protocol_version = "HTTP/1.1"  # keep-alive, and chunked watch streams the client reads line by line
    _raw = b""

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            super().log_message(format, *args)

    # -- plumbing -------------------------------------------------------------------------

    def _send(self, code: int, doc: dict[str, Any]) -> None:
        data = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> Any:
        if not self._raw:
            return None
        try:
            return json.loads(self._raw)
        except ValueError as exc:
            raise StoreError(400, "BadRequest", f"the request body is not JSON: {exc}") from exc

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        self._raw = self.rfile.read(length) if length > 0 else b""  # always drained: keep-alive
        try:
            sent = self.headers.get("Authorization", "")
            if not hmac.compare_digest(sent.encode(), f"Bearer {self.server.token}".encode()):
                raise StoreError(401, "Unauthorized", "Unauthorized")
            with self.server.count_lock:
                self.server.requests += 1
            self._route(method, url.path.rstrip("/") or "/", query)
        except StoreError as exc:
            self._send(exc.code, status_doc(exc.code, exc.reason, exc.message))
        except (BrokenPipeError, ConnectionResetError):
            pass

    # -- routing --------------------------------------------------------------------------

    def _knob(self, name: str, default: Any) -> Any:
        return (self.server.knobs(None) if self.server.knobs is not None else {}).get(name, default)

    def _hidden(self) -> tuple[str, ...]:
        """The groups not served: the Agent Sandbox's when the knob says the add-on is off."""
        return () if self._knob("agent_sandbox", True) else kinds.AGENT_SANDBOX_GROUPS

    def _route(self, method: str, path: str, query: dict[str, str]) -> None:
        fixed = self._discovery(path) if method == "GET" else None
        if fixed is not None:
            return self._send(200, fixed)
        if path == "/_stand-in/knobs" and self.server.knobs is not None:
            change = self._body() if method == "PUT" else None
            return self._send(200, self.server.knobs(change))
        m = _CORE.match(path) or _GROUP.match(path)
        groups = m.groupdict() if m else {}
        kind = kinds.find(groups.get("group") or "", groups.get("version") or "v1",
                          groups.get("plural") or "") if m else None  # fmt: skip
        if kind is None or kind.group in self._hidden():
            raise StoreError(404, "NotFound", f"the server could not find the requested resource ({path})")
        if kind is kinds.ACCESS_REVIEWS:
            if method != "POST" or groups.get("name"):
                raise StoreError(405, "MethodNotAllowed", f"{method} is not allowed")
            return self._send(201, self._review(self._body()))
        ns, name, sub = groups.get("ns") or "", groups.get("name"), groups.get("sub")
        if not kind.namespaced and ns:
            raise StoreError(404, "NotFound", f"{kind.plural} is not namespaced")
        if sub is not None and sub not in kind.subresources:
            raise StoreError(404, "NotFound", f"{kind.plural}/{sub} is not served")
        if sub == "exec":
            return self._exec(ns, name or "")
        if name is None:
            if method == "GET":
                return self._list_or_watch(kind, ns or None, query)
            if method == "POST":
                return self._send(201, self._create(kind, ns, self._body()))
            raise StoreError(405, "MethodNotAllowed", f"{method} is not allowed on a collection")
        if method == "GET":
            obj = self.server.store.get(kind.resource, ns, name)
            return self._send(200, _scale(kind, obj) if sub == "scale" else obj)
        if method in ("PUT", "PATCH"):
            return self._send(200, self._write(kind, ns, name, sub, method, self._body()))
        if method == "DELETE":
            if kind is kinds.NAMESPACES:
                _empty_namespace(self.server.store, name)
            return self._send(200, self.server.store.delete(kind.resource, ns, name))
        raise StoreError(405, "MethodNotAllowed", f"{method} is not allowed")

    def _discovery(self, path: str) -> dict[str, Any] | None:
        if path == "/version":
            return {"major": "1", "minor": "33", "gitVersion": "v1.33.0-hangar-stand-in",
                    "gitCommit": "0" * 40, "gitTreeState": "clean",
                    "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.24",
                    "compiler": "gc", "platform": "linux/amd64"}  # fmt: skip
        if path == "/api":
            return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": self.server.server_address[0]}]}
        if path == "/apis":
            return kinds.groups(self._hidden())
        if path == "/api/v1":
            return kinds.discovery("", "v1")
        parts = path.split("/")
        if len(parts) == 4 and parts[1] == "apis":
            return kinds.discovery(parts[2], parts[3], self._hidden())
        return None

    def _review(self, body: Any) -> Obj:
        """A SelfSubjectAccessReview answered: allowed unless the ``denied`` knob names its
        verb and resource (``resource/subresource``; ``*`` matches any), as RBAC would."""
        review = _checked(kinds.ACCESS_REVIEWS, body, "")
        attrs = review["spec"].get("resourceAttributes") or {}
        verb = str(attrs.get("verb") or "")
        resource = "/".join(p for p in (attrs.get("resource"), attrs.get("subresource")) if p)
        refused = any(v in ("*", verb) and r in ("*", resource)
                      for v, r in (d.split() for d in self._knob("denied", [])))  # fmt: skip
        review["status"] = {"allowed": not refused, **({"denied": True, "reason": "RBAC: "
                            f"no rule allows {verb} {resource}"} if refused else {})}  # fmt: skip
        return review

    def _exec(self, ns: str, name: str) -> None:
        self.server.store.get(kinds.PODS.resource, ns, name)
        if self.server.exec_handler is None:
            raise StoreError(501, "NotImplemented", "pods/exec is not served by this stand-in yet")
        self.server.exec_handler(self, ns, name)

    # -- verbs ----------------------------------------------------------------------------

    def _list_or_watch(self, kind: Kind, ns: str | None, query: dict[str, str]) -> None:
        labels = selector(query.get("labelSelector"))
        fields = _field_selector(query.get("fieldSelector"))

        def match(obj: Obj) -> bool:
            meta = obj.get("metadata", {})
            return labels(meta.get("labels") or {}) and fields(obj)

        store = self.server.store
        if query.get("watch") in ("1", "true", "True"):
            return self._watch(kind, ns, query, match)
        items, rv = store.list(kind.resource, ns, match)
        for item in items:
            item.setdefault("apiVersion", kind.api_version)
            item.setdefault("kind", kind.kind)
        self._send(200, {"kind": f"{kind.kind}List", "apiVersion": kind.api_version,
                         "metadata": {"resourceVersion": str(rv)}, "items": items})  # fmt: skip

    def _watch(self, kind: Kind, ns: str | None, query: dict[str, str], match: Callable[[Obj], bool]) -> None:
        store = self.server.store
        timeout = float(query.get("timeoutSeconds") or 1800)
        deadline = time.monotonic() + timeout
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        start = query.get("resourceVersion") or "0"
        try:
            if start == "0":
                items, rv = store.list(kind.resource, ns, match)
                for item in items:
                    self._event("ADDED", kind, item)
            else:
                rv = int(start)
            stop = lambda: self.server.stopping.is_set() or time.monotonic() >= deadline  # noqa: E731
            for event in store.stream(rv, stop, tick=min(0.5, max(timeout, 0.05))):
                obj = event.obj
                in_ns = ns is None or obj.get("metadata", {}).get("namespace") == ns
                if event.resource == kind.resource and in_ns and match(obj):
                    self._event(event.type, kind, obj)
        except Expired as exc:
            self._line({"type": "ERROR", "object": status_doc(410, exc.reason, exc.message)})
        except ValueError:
            bad = status_doc(400, "BadRequest", f"invalid resourceVersion {start!r}")
            self._line({"type": "ERROR", "object": bad})
        self.wfile.write(b"0\r\n\r\n")

    def _event(self, type_: str, kind: Kind, obj: Obj) -> None:
        obj.setdefault("apiVersion", kind.api_version)
        obj.setdefault("kind", kind.kind)
        self._line({"type": type_, "object": obj})

    def _line(self, doc: dict[str, Any]) -> None:
        """One watch event as one chunk of the chunked response."""
        data = json.dumps(doc).encode() + b"\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _create(self, kind: Kind, ns: str, body: Any) -> Obj:
        obj = _checked(kind, body, ns)
        if kind.namespaced:
            self.server.store.get(kinds.NAMESPACES.resource, "", ns)
        if "status" in kind.subresources and kind is not kinds.PODS:
            obj.pop("status", None)  # the status subresource owns it
        return self.server.store.create(kind.resource, ns, obj)

    def _write(self, kind: Kind, ns: str, name: str, sub: str | None, method: str, body: Any) -> Obj:
        content_type = self.headers.get("Content-Type", "application/json")

        def change(old: Obj) -> Obj:
            if sub == "scale":
                current = _scale(kind, old)
                new = apply_patch(content_type, current, body) if method == "PATCH" else body
                if not isinstance(new, dict) or not isinstance(new.get("spec", {}).get("replicas"), int):
                    raise StoreError(422, "Invalid", "spec.replicas: Required value")
                old.setdefault("spec", {})["replicas"] = new["spec"]["replicas"]
                rv = new.get("metadata", {}).get("resourceVersion")
                if rv:
                    old["metadata"]["resourceVersion"] = rv
                return old
            new = apply_patch(content_type, old, body) if method == "PATCH" else body
            new = _checked(kind, new, ns, name)
            if sub == "status":
                old["status"] = new.get("status", {})
                if new.get("metadata", {}).get("resourceVersion"):
                    old["metadata"]["resourceVersion"] = new["metadata"]["resourceVersion"]
                return old
            if "status" in kind.subresources:
                new["status"] = old.get("status", {})
                if not new["status"]:
                    new.pop("status")
            return new

        obj = self.server.store.update(kind.resource, ns, name, change)
        return _scale(kind, obj) if sub == "scale" else obj


def _checked(kind: Kind, body: Any, ns: str, name: str | None = None) -> Obj:
    """``body`` as an object of ``kind``: right apiVersion and kind, namespace and name agreeing
    with the path, every field known (400) and valid (422)."""
    if not isinstance(body, dict):
        raise StoreError(400, "BadRequest", "the request body must be a JSON object")
    sent = (body.get("apiVersion", kind.api_version), body.get("kind", kind.kind))
    if sent != (kind.api_version, kind.kind):
        raise StoreError(400, "BadRequest",
                         f"the object is not a {kind.api_version} {kind.kind}")  # fmt: skip
    schema = {"apiVersion": kinds.STR, "kind": kinds.STR, "metadata": kinds.OBJECT_META, **kind.schema}
    unknown, invalid = kinds.violations(body, schema)
    if unknown:
        raise StoreError(400, "BadRequest", "strict decoding error: " + ", ".join(unknown))
    meta = body.get("metadata") or {}
    if meta.get("namespace") not in (None, "", ns) and kind.namespaced:
        invalid.append("metadata.namespace: Invalid value: does not match the namespace of the request")
    if name is not None and meta.get("name") not in (None, name):
        invalid.append("metadata.name: Invalid value: does not match the name in the URL")
    if invalid:
        what = f'{kind.kind} "{meta.get("name", "")}" is invalid: '
        raise StoreError(422, "Invalid", what + "; ".join(invalid))
    out = dict(body, apiVersion=kind.api_version, kind=kind.kind)
    out["metadata"] = dict(meta)
    if name is not None:
        out["metadata"]["name"] = name
    return out


def _empty_namespace(store: Store, ns: str) -> None:
    """Delete every object in namespace ``ns`` (dependents go with their owners)."""
    # owners first, so the controller has nothing left to refill
    for kind in (kinds.CLAIMS, kinds.WARM_POOLS, kinds.TEMPLATES, kinds.SANDBOXES, kinds.PODS,
                 kinds.EVENTS):  # fmt: skip
        for obj in store.list(kind.resource, ns)[0]:
            try:
                store.delete(kind.resource, ns, obj["metadata"]["name"])
            except StoreError:  # already gone with its owner
                pass


def _scale(kind: Kind, obj: Obj) -> Obj:
    """The ``autoscaling/v1`` Scale of a warm pool."""
    if kind is not kinds.WARM_POOLS:
        raise StoreError(404, "NotFound", f"{kind.plural}/scale is not served")
    meta = obj["metadata"]
    return {"kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion",
                                              "creationTimestamp") if k in meta},
            "spec": {"replicas": obj.get("spec", {}).get("replicas", 0)},
            "status": {"replicas": obj.get("status", {}).get("replicas", 0),
                       "selector": obj.get("status", {}).get("selector", "")}}  # fmt: skip


_FIELDS = re.compile(r"^\s*(metadata\.(?:name|namespace)|involvedObject\.(?:name|namespace|kind|uid)"
                     r"|reason|type)\s*(==|=|!=)\s*(\S*)\s*$")  # fmt: skip
"""The field labels served: ``metadata.name`` and ``metadata.namespace`` on every kind, and an
Event's ``involvedObject.{name,namespace,kind,uid}``, ``reason`` and ``type``, as the API
server's field label conversion for core/v1 events allows them."""


def _field_selector(text: str | None) -> Callable[[Obj], bool]:
    """Equality (``=``, ``==``, ``!=``) on the field labels of :data:`_FIELDS`, all terms
    ANDed; 400 BadRequest on another label."""
    tests: list[Callable[[Obj], bool]] = []
    for term in filter(None, (text or "").split(",")):
        m = _FIELDS.match(term)
        if m is None:
            raise StoreError(400, "BadRequest", f"field label not supported: {term}")
        tests.append(_field_test(m[1].split("."), m[2] != "!=", m[3]))

    def match(obj: Obj) -> bool:
        return all(test(obj) for test in tests)

    return match


def _field_test(path: list[str], equal: bool, value: str) -> Callable[[Obj], bool]:
    def test(obj: Obj) -> bool:
        found: Any = obj
        for part in path:
            found = found.get(part) if isinstance(found, dict) else None
        return bool((found == value) == equal)

    return test
