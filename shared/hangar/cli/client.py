"""The CLI's HTTP client: the REST API only, so the CLI works the same against a remote
server. Every failure comes back as :class:`ApiError` with the server's stable code, or
``unreachable`` when there was no answer."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import httpx

TIMEOUT = httpx.Timeout(660.0, connect=10.0)  # longer than the longest wait the API allows
STREAM_TIMEOUT = httpx.Timeout(None, connect=10.0)  # a stream may be quiet for a long time


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


class Client:
    """``url`` is taken through :func:`base_url`. ``token_hint`` is said when the server
    refuses a call made without a token."""

    def __init__(self, url: str, token: str | None, token_hint: str = "") -> None:
        self.url = base_url(url)
        self.token = token
        self.token_hint = token_hint
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=TIMEOUT)

    def call(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> Any:
        """JSON in; JSON out (bytes for other media, None for 204)."""
        try:
            response = self.http.request(method, path, json=body, params=params)
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from None
        if response.status_code >= 400:
            raise self._error(response)
        if response.status_code == 204:
            return None
        if response.headers.get("content-type", "").startswith("application/json"):
            return response.json()
        return response.content

    def put_bytes(self, path: str, data: bytes) -> Any:
        """PUT raw bytes; JSON out."""
        try:
            response = self.http.put(path, content=data,
                                     headers={"Content-Type": "application/octet-stream"})
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from None
        if response.status_code >= 400:
            raise self._error(response)
        return response.json()

    def lines(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> Iterator[bytes]:
        """A streamed answer's lines, each as it completes (with its newline; the last may
        lack one)."""
        try:
            with self.http.stream(method, path, json=body, params=params,
                                  timeout=STREAM_TIMEOUT) as response:  # fmt: skip
                if response.status_code >= 400:
                    response.read()
                    raise self._error(response)
                pending = b""
                for chunk in response.iter_bytes():
                    pending += chunk
                    *done, pending = pending.split(b"\n")
                    for line in done:
                        yield line + b"\n"
                if pending:
                    yield pending
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from None

    def frames(self, path: str, body: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        """An NDJSON answer's objects, as they come."""
        for line in self.lines("POST", path, body):
            if line.strip():
                yield json.loads(line)

    def _unreachable(self, exc: httpx.HTTPError) -> ApiError:
        return ApiError("unreachable", f"no answer from hangar at {self.url}: {exc}")

    def _error(self, response: httpx.Response) -> ApiError:
        try:
            error = response.json()["error"]
            code, message = str(error["code"]), str(error["message"])
        except (ValueError, KeyError, TypeError):
            code, message = "http_error", f"HTTP {response.status_code}: {response.text[:200]}"
        if code == "unauthorized" and not self.token and self.token_hint:
            message = self.token_hint
        return ApiError(code, message, response.status_code)
