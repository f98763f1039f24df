"""The Cloud Run stand-in: the read side of the Cloud Run Admin API v2, as its REST surface serves
it to ``google.cloud.run_v2.ServicesClient(transport="rest")``.

- ``GET /v2/projects/{p}/locations/{l}/services`` lists the services under that parent, sorted
  by name, ``pageSize`` at a time (default 100) with an opaque ``nextPageToken``.
- ``GET /v2/projects/{p}/locations/{l}/services/{s}`` gets one; an unknown one is a 404.
- ``GET /v2/projects/{p}/locations/{l}/services/{s}:getIamPolicy`` gets its IAM policy
  (``{"version", "etag", "bindings": [{"role", "members"}]}``; no bindings until one is set).
- Errors are Google's JSON shape: ``{"error": {"code", "message", "status"}}``; any other path or
  method is a 404 / 405 in that shape.

Services are v2 REST JSON documents held in memory (camelCase field names, enums by name:
``ingress`` ``"INGRESS_TRAFFIC_ALL"``, condition ``state`` ``"CONDITION_SUCCEEDED"``), put there
with :meth:`CloudRunStandIn.put_service` and served as given, so a test can shape any field;
:func:`service_doc` builds a typical one. The client asks for ``$alt=json;enum-encoding=int``; its
parser takes enum names as well, so they are not converted.

Standard library only.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import zlib
from collections.abc import Mapping
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from emulators.googleapi import ApiError, JsonHandler
from emulators.processes import ThreadedStandIn

_PARENT = r"projects/[^/:]+/locations/[^/:]+"
_NAME = re.compile(rf"^{_PARENT}/services/[^/:]+$")
_LIST = re.compile(rf"^/v2/({_PARENT})/services$")
_GET = re.compile(rf"^/v2/({_PARENT}/services/[^/:]+)$")
_IAM = re.compile(rf"^/v2/({_PARENT}/services/[^/:]+):getIamPolicy$")
_DEFAULT_PAGE = 100
_MAX_PAGE = 1000


def service_doc(
    name: str,
    *,
    uri: str | None = None,
    env: Mapping[str, str] | None = None,
    ready: bool = True,
    ingress: str = "INGRESS_TRAFFIC_ALL",
    invoker_iam_disabled: bool = False,
    message: str = "",
) -> dict[str, Any]:
    """A v2 Service document as Cloud Functions gen2 leaves one: ``name`` is the full resource
    name (``projects/P/locations/L/services/S``); ``uri`` defaults to a ``run.app`` address;
    one container with ``env``; a ``Ready`` terminal condition that succeeded (or failed with
    ``message`` when ``ready`` is false)."""
    if not _NAME.match(name):
        raise ValueError(f"not a service name: {name!r}")
    _, project, _, region, _, short = name.split("/")
    number = zlib.crc32(project.encode()) % 10**12  # stands in for the project number
    address = uri or f"https://{short}-{number}.{region}.run.app"
    condition = {
        "type": "Ready",
        "state": "CONDITION_SUCCEEDED" if ready else "CONDITION_FAILED",
        "message": "" if ready else (message or "Revision is not ready"),
    }
    return {
        "name": name,
        "uid": f"uid-{short}",
        "generation": "1",
        "ingress": ingress,
        "launchStage": "GA",
        "invokerIamDisabled": invoker_iam_disabled,
        "template": {
            "containers": [
                {
                    "image": f"{region}-docker.pkg.dev/{project}/gcf-artifacts/{short}:latest",
                    "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
                }
            ]
        },
        "uri": address,
        "urls": [address],
        "terminalCondition": condition,
        "conditions": [condition],
        "reconciling": False,
    }


def _not_found(name: str) -> ApiError:
    return ApiError(404, "NOT_FOUND", f"Resource '{name}' was not found")


class _State:
    """The services and their IAM policies, by full resource name."""

    def __init__(self) -> None:
        self.services: dict[str, dict[str, Any]] = {}
        self.policies: dict[str, dict[str, Any]] = {}
        self.lock = threading.Lock()

    def list(self, parent: str, query: Mapping[str, list[str]]) -> dict[str, Any]:
        try:
            size = int(query.get("pageSize", [str(_DEFAULT_PAGE)])[0]) or _DEFAULT_PAGE
            start = _token(query.get("pageToken", [""])[0])
        except ValueError:
            raise ApiError(400, "INVALID_ARGUMENT", "bad pageSize or pageToken") from None
        size = min(max(size, 1), _MAX_PAGE)
        with self.lock:
            names = sorted(n for n in self.services if n.startswith(parent + "/services/"))
            page = [json.loads(json.dumps(self.services[n])) for n in names[start : start + size]]
        doc: dict[str, Any] = {"services": page}
        if start + size < len(names):
            doc["nextPageToken"] = base64.urlsafe_b64encode(str(start + size).encode()).decode()
        return doc

    def get(self, name: str) -> dict[str, Any]:
        with self.lock:
            if name not in self.services:
                raise _not_found(name)
            return dict(json.loads(json.dumps(self.services[name])))

    def policy(self, name: str) -> dict[str, Any]:
        with self.lock:
            if name not in self.services:
                raise _not_found(name)
            bindings = self.policies.get(name, {}).get("bindings", [])
        digest = hashlib.sha256(json.dumps(bindings, sort_keys=True).encode()).digest()
        etag = base64.b64encode(digest[:8]).decode()
        doc: dict[str, Any] = {"version": 1, "etag": etag}
        if bindings:
            doc["bindings"] = bindings
        return doc


def _token(raw: str) -> int:
    if not raw:
        return 0
    value = int(base64.urlsafe_b64decode(raw.encode()).decode())
    if value < 0:
        raise ValueError(raw)
    return value


class _Handler(JsonHandler):
    server: _Server

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        state = self.server.state
        try:
            if match := _LIST.match(parts.path):
                self.send_json(200, state.list(match.group(1), parse_qs(parts.query)))
            elif match := _IAM.match(parts.path):
                self.send_json(200, state.policy(match.group(1)))
            elif match := _GET.match(parts.path):
                self.send_json(200, state.get(match.group(1)))
            else:
                raise ApiError(404, "NOT_FOUND", f"no such method: GET {parts.path}")
        except ApiError as exc:
            self.send_api_error(exc)

    def _refuse(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        method = self.command
        self.send_api_error(ApiError(405, "METHOD_NOT_ALLOWED", f"{method} is not served here"))

    do_POST = do_PATCH = do_PUT = do_DELETE = _refuse


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], state: _State, verbose: bool) -> None:
        super().__init__(address, _Handler)
        self.state = state
        self.verbose = verbose


class CloudRunStandIn(ThreadedStandIn):
    """The stand-in in a background thread: ``start()`` binds and serves, ``url`` is its base
    URL, ``stop()`` shuts it down; also a context manager. Services can be put and removed
    while it serves."""

    label = "cloud run stand-in"

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, verbose: bool = False) -> None:
        super().__init__(host, port, verbose=verbose)
        self._state = _State()

    def make_server(self) -> _Server:
        return _Server((self.host, self.port), self._state, self.verbose)

    def put_service(self, service: Mapping[str, Any]) -> None:
        """Add or replace the service named by ``service["name"]`` (a v2 REST JSON document; a
        deep copy is kept). ValueError when the name is not ``projects/P/locations/L/services/S``
        or the document is not JSON."""
        name = service.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(f"a service needs a full name, got {name!r}")
        doc = json.loads(json.dumps(dict(service)))
        with self._state.lock:
            self._state.services[name] = doc

    def remove_service(self, name: str) -> None:
        """Forget a service and its policy. Idempotent."""
        with self._state.lock:
            self._state.services.pop(name, None)
            self._state.policies.pop(name, None)

    def set_invokers(self, name: str, members: list[str]) -> None:
        """Set the members of ``roles/run.invoker`` in the service's IAM policy (``allUsers``
        makes it public; an empty list removes the binding)."""
        bindings = [{"role": "roles/run.invoker", "members": list(members)}] if members else []
        with self._state.lock:
            self._state.policies[name] = {"bindings": bindings}

    def services(self) -> list[dict[str, Any]]:
        """Every service held, by name."""
        with self._state.lock:
            held = self._state.services
            return [json.loads(json.dumps(held[name])) for name in sorted(held)]
