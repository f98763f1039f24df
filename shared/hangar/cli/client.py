"""The CLI's HTTP client: the REST API only, so the CLI works the same against a remote
server. Every failure comes back as :class:`ApiError` with the server's stable code, or
``unreachable`` when there was no answer.

Standard library only (``http.client``): a command such as ``session list`` is mostly the
interpreter's start, and an HTTP library's import would cost it more than its call. Connections
are kept alive and reused, one per request in flight (following a turn reads its log stream
while it waits on the turn).
"""

from __future__ import annotations

import http.client
import json
import os
import select
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

DEFAULT_URL = "http://127.0.0.1:8080"
"""``HANGAR_URL`` when unset (``hangar serve``'s default address)."""
TOKEN_FILE = "admin-token"
"""The admin token's file in the data folder, where ``hangar serve`` writes it."""
CONNECT_TIMEOUT = 10.0
READ_TIMEOUT = 660.0  # longer than the longest wait the API allows
STREAM_TIMEOUT = None  # a stream may be quiet for a long time
CHUNK = 65536


class ApiError(Exception):
    def __init__(self, code: str, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


def session_path(ref: str, action: str = "") -> str:
    return f"/api/sessions/{quote(ref, safe='')}" + (f"/{action}" if action else "")


def base_url(url: str) -> str:
    """The server's base URL from ``HANGAR_URL``: without a trailing slash, and without a
    trailing ``/api``, which the API's paths carry themselves (an older ``hangar serve`` printed
    ``http://HOST:PORT/api`` at start, and that URL taken as is made every call
    ``/api/api/...``, a 404)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/").removesuffix("/api")))


def default_data_dir(env: Mapping[str, str]) -> Path:
    """``HANGAR_DATA_DIR`` unset: ``~/.hangar`` (what :class:`hangar.config.Settings` uses)."""
    return Path(env.get("HOME") or Path.home()) / ".hangar"


def configured(url: str, token: str | None, data_dir: Path,
               env: Mapping[str, str] | None = None) -> Client:  # fmt: skip
    """A client for ``url`` with ``token``, else the token file in ``data_dir``; proxies as
    ``env`` says (:func:`proxy_for`)."""
    path = data_dir / TOKEN_FILE
    if not token:
        try:
            token = path.read_text().strip() or None
        except OSError:
            token = None
    hint = (f"no token: set HANGAR_TOKEN, or HANGAR_DATA_DIR to the server's data folder "
            f"(no readable {path})")  # fmt: skip
    return Client(url, token, hint, env)


def from_env(env: Mapping[str, str]) -> Client:
    """The client ``HANGAR_URL``, ``HANGAR_TOKEN`` and ``HANGAR_DATA_DIR`` describe, read as
    :class:`hangar.config.Settings` reads them, without building the settings: the server's
    own settings are no concern of a client, and their model costs a command its import."""
    data_dir = env.get("HANGAR_DATA_DIR") or default_data_dir(env)
    return configured(env.get("HANGAR_URL") or DEFAULT_URL, env.get("HANGAR_TOKEN") or None,
                      Path(data_dir).expanduser().absolute(), env)  # fmt: skip


LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})


def proxy_for(scheme: str, host: str, env: Mapping[str, str]) -> tuple[str, int] | None:
    """The proxy a request to ``host`` goes through, as curl and most HTTP clients read it:
    ``HTTPS_PROXY`` or ``HTTP_PROXY`` by the server's scheme (either letter case; ``http://``
    proxies only), unless ``NO_PROXY`` names the host, a domain it is in, or ``*``. The
    loopback never goes through a proxy (a local ``hangar serve``)."""
    if host.lower() in LOOPBACK:
        return None
    bypass = env.get("NO_PROXY", env.get("no_proxy", ""))
    for entry in filter(None, (e.strip().lower().lstrip(".") for e in bypass.split(","))):
        if entry == "*" or host.lower() == entry or host.lower().endswith("." + entry):
            return None
    name = f"{scheme}_proxy"
    value = env.get(name, env.get(name.upper(), ""))
    if not value:
        return None
    proxy = urlsplit(value if "://" in value else f"http://{value}")
    if proxy.scheme != "http" or not proxy.hostname:
        raise ApiError("unreachable", f"{name.upper()} must be an http:// proxy URL")
    return proxy.hostname, proxy.port or 80


class Client:
    """``url`` is taken through :func:`base_url`. ``token_hint`` is said when the server
    refuses a call made without a token. ``env``: where the proxy settings are read
    (:func:`proxy_for`; the process's environment when None). Safe to use from several
    threads."""

    def __init__(self, url: str, token: str | None, token_hint: str = "",
                 env: Mapping[str, str] | None = None) -> None:  # fmt: skip
        self.url = base_url(url)
        self.token = token
        self.token_hint = token_hint
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        parts = urlsplit(self.url)
        self._scheme, self._prefix = parts.scheme, parts.path
        self._host, self._port = parts.hostname or "", parts.port
        self._proxy = proxy_for(self._scheme, self._host, os.environ if env is None else env)
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def call(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> Any:
        """JSON in; JSON out (bytes for other media, None for 204)."""
        status, media, data = self._exchange(method, path, *_json_body(body), params)
        if status == 204:
            return None
        if media.startswith("application/json"):
            return json.loads(data)
        return data

    def put_bytes(self, path: str, data: bytes) -> Any:
        """PUT raw bytes; JSON out."""
        _, _, answer = self._exchange("PUT", path, data, "application/octet-stream", None)
        return json.loads(answer)

    def lines(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> Iterator[bytes]:
        """A streamed answer's lines, each as it completes (with its newline; the last may
        lack one)."""
        conn, response = self._request(method, path, *_json_body(body), params, STREAM_TIMEOUT)
        done = False
        try:
            if response.status >= 400:
                raise self._error(response.status, response.read())
            pending = b""
            while chunk := response.read1(CHUNK):
                pending += chunk
                *complete, pending = pending.split(b"\n")
                for line in complete:
                    yield line + b"\n"
            if pending:
                yield pending
            done = True
        except (OSError, http.client.HTTPException) as exc:
            raise self._unreachable(exc) from None
        finally:
            self._release(conn, response, done)

    def frames(self, path: str, body: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        """An NDJSON answer's objects, as they come."""
        for line in self.lines("POST", path, body):
            if line.strip():
                yield json.loads(line)

    def _exchange(self, method: str, path: str, data: bytes | None, media: str | None,
                  params: Mapping[str, Any] | None) -> tuple[int, str, bytes]:  # fmt: skip
        """One whole request and answer: (status, content type, body); ApiError on >= 400."""
        conn, response = self._request(method, path, data, media, params, READ_TIMEOUT)
        done = False
        try:
            answer = response.read()
            done = True
        except (OSError, http.client.HTTPException) as exc:
            raise self._unreachable(exc) from None
        finally:
            self._release(conn, response, done)
        if response.status >= 400:
            raise self._error(response.status, answer)
        return response.status, response.getheader("Content-Type") or "", answer

    def _request(self, method: str, path: str, data: bytes | None, media: str | None,
                 params: Mapping[str, Any] | None, timeout: float | None,
                 ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:  # fmt: skip
        """Send a request on an idle kept-alive connection, else a new one; its response."""
        target = self._prefix + path + (f"?{urlencode(_query(params))}" if params else "")
        if self._proxy and self._scheme == "http":  # a forward proxy takes the whole URL
            target = self.url.removesuffix(self._prefix) + target
        headers = {**self.headers, **({"Content-Type": media} if media else {})}
        while True:
            conn, reused = self._connection()
            try:
                if conn.sock is None:
                    conn.connect()
                assert conn.sock is not None
                conn.sock.settimeout(timeout)
                conn.request(method, target, body=data, headers=headers)
                return conn, conn.getresponse()
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                # A kept-alive connection the server closed as this request went out: the
                # request never reached it, and a read is safe to send again on a new one.
                if not (reused and method == "GET"):
                    raise self._unreachable(exc) from None
            except BaseException:
                conn.close()
                raise

    def _connection(self) -> tuple[http.client.HTTPConnection, bool]:
        """An idle connection the server has not closed (True), else a new one (False)."""
        with self._lock:
            while self._idle:
                conn = self._idle.pop()
                sock = conn.sock
                if sock is not None and not select.select([sock], [], [], 0)[0]:
                    return conn, True
                conn.close()  # readable while idle: closed by the server, or garbage
        if self._scheme not in ("http", "https") or not self._host:
            raise ApiError("unreachable", f"no answer from hangar at {self.url}: HANGAR_URL "
                           "must be an http:// or https:// URL")  # fmt: skip
        kind = http.client.HTTPSConnection if self._scheme == "https" else http.client.HTTPConnection
        if self._proxy is None:
            return kind(self._host, self._port, timeout=CONNECT_TIMEOUT), False
        conn = kind(*self._proxy, timeout=CONNECT_TIMEOUT)
        if self._scheme == "https":  # through a CONNECT tunnel, TLS end to end
            conn.set_tunnel(self._host, self._port)
        return conn, False

    def _release(self, conn: http.client.HTTPConnection, response: http.client.HTTPResponse,
                 done: bool) -> None:  # fmt: skip
        """Keep ``conn`` for the next request when its answer was read to the end."""
        if done and not response.will_close and conn.sock is not None:
            with self._lock:
                self._idle.append(conn)
        else:
            conn.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def _unreachable(self, exc: BaseException) -> ApiError:
        reason = str(exc) or type(exc).__name__
        return ApiError("unreachable", f"no answer from hangar at {self.url}: {reason}")

    def _error(self, status: int, data: bytes) -> ApiError:
        try:
            error = json.loads(data)["error"]
            code, message = str(error["code"]), str(error["message"])
        except (ValueError, KeyError, TypeError):
            text = data.decode("utf-8", "replace")
            code, message = "http_error", f"HTTP {status}: {text[:200]}"
        if code == "unauthorized" and not self.token and self.token_hint:
            message = self.token_hint
        return ApiError(code, message, status)


def _json_body(body: Mapping[str, Any] | None) -> tuple[bytes | None, str | None]:
    if body is None:
        return None, None
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode(), "application/json"


def _query(params: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Query parameters as the API reads them: booleans as ``true``/``false``, None empty."""
    return [(k, ("true" if v else "false") if isinstance(v, bool) else "" if v is None else str(v))
            for k, v in params.items()]  # fmt: skip

