"""The CLI's HTTP client: the REST API only, so the CLI works the same against a remote
server. Errors come back as :class:`ApiError` with the server's stable code."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import httpx


class ApiError(Exception):
    def __init__(self, code: str, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


class Client:
    def __init__(self, url: str, token: str | None, timeout: float = 660.0) -> None:
        self.url = url.rstrip("/")
        self.token = token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def call(self, method: str, path: str, body: dict[str, Any] | None = None,
             params: dict[str, Any] | None = None) -> Any:  # fmt: skip
        """JSON in, JSON (or text) out; ApiError for an error answer or no answer."""
        try:
            response = self.http.request(method, path, json=body, params=params)
        except httpx.HTTPError as exc:
            raise ApiError("unreachable", f"cannot reach hangar at {self.url}: {exc}") from None
        if response.status_code >= 400:
            raise _error(response)
        if response.status_code == 204:
            return None
        if response.headers.get("content-type", "").startswith("application/json"):
            return response.json()
        return response.content

    def stream_exec(self, ref: str, argv: list[str], stdin: bytes | None) -> Iterator[dict[str, Any]]:
        """The exec endpoint's NDJSON frames, as they come."""
        body: dict[str, Any] = {"argv": argv}
        if stdin:
            body["stdin"] = base64.b64encode(stdin).decode()
        try:
            with self.http.stream("POST", f"/api/sessions/{ref}/exec", json=body) as response:
                if response.status_code >= 400:
                    response.read()
                    raise _error(response)
                for line in response.iter_lines():
                    if line.strip():
                        yield json.loads(line)
        except httpx.HTTPError as exc:
            raise ApiError("unreachable", f"cannot reach hangar at {self.url}: {exc}") from None


def _error(response: httpx.Response) -> ApiError:
    try:
        error = response.json()["error"]
        return ApiError(str(error["code"]), str(error["message"]), response.status_code)
    except (ValueError, KeyError, TypeError):
        return ApiError("http_error", f"HTTP {response.status_code}: {response.text[:200]}",
                        response.status_code)  # fmt: skip
