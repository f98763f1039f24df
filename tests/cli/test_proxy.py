"""The CLI reaches a remote hangar through the proxy its environment names, as curl does: a
forward proxy for http://, a CONNECT tunnel for https://; never for the loopback or what
NO_PROXY names."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from hangar.cli.client import ApiError, Client, proxy_for


class _Proxy(BaseHTTPRequestHandler):
    """Records each request line and its headers; answers a JSON list of no sessions, and
    refuses every tunnel."""

    seen: list[tuple[str, dict[str, str]]]

    def do_GET(self) -> None:
        self.seen.append((self.requestline, dict(self.headers)))
        body = json.dumps({"sessions": [], "next_cursor": None}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_CONNECT(self) -> None:
        self.seen.append((self.requestline, dict(self.headers)))
        self.send_response(403)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def proxy() -> Iterator[tuple[str, list[tuple[str, dict[str, str]]]]]:
    seen: list[tuple[str, dict[str, str]]] = []
    handler = type("Proxy", (_Proxy,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


def test_a_remote_http_server_is_asked_through_the_forward_proxy_with_the_whole_url(
    proxy: tuple[str, list[tuple[str, dict[str, str]]]],
) -> None:
    url, seen = proxy
    client = Client("http://hangar.example:8080/", "tok", env={"http_proxy": url})
    assert client.call("GET", "/api/sessions", params={"limit": 5}) == {
        "sessions": [], "next_cursor": None}
    [(line, headers)] = seen
    assert line == "GET http://hangar.example:8080/api/sessions?limit=5 HTTP/1.1"
    assert headers["Authorization"] == "Bearer tok" and headers["Host"] == "hangar.example:8080"


def test_a_remote_https_server_is_reached_through_a_connect_tunnel(
    proxy: tuple[str, list[tuple[str, dict[str, str]]]],
) -> None:
    url, seen = proxy
    client = Client("https://hangar.example", "tok", env={"HTTPS_PROXY": url})
    with pytest.raises(ApiError) as refused:
        client.call("GET", "/api/sessions")
    assert refused.value.code == "unreachable" and "403" in refused.value.message
    [(line, headers)] = seen
    assert line == "CONNECT hangar.example:443 HTTP/1.0"
    assert "Authorization" not in headers  # the token only ever goes inside the tunnel


@pytest.mark.parametrize(
    ("host", "env", "expected"),
    [
        ("127.0.0.1", {"HTTP_PROXY": "http://proxy:3128"}, None),
        ("localhost", {"HTTP_PROXY": "http://proxy:3128"}, None),
        ("hangar.example", {"HTTP_PROXY": "http://proxy:3128"}, ("proxy", 3128)),
        ("hangar.example", {"HTTP_PROXY": "proxy"}, ("proxy", 80)),
        ("hangar.example", {"HTTPS_PROXY": "http://proxy:3128"}, None),  # another scheme's
        ("run.example.com", {"HTTP_PROXY": "http://p:1", "NO_PROXY": ".example.com"}, None),
        ("example.com", {"HTTP_PROXY": "http://p:1", "no_proxy": "other, example.com"}, None),
        ("notexample.com", {"HTTP_PROXY": "http://p:1", "NO_PROXY": "example.com"}, ("p", 1)),
        ("hangar.example", {"HTTP_PROXY": "http://p:1", "NO_PROXY": "*"}, None),
    ],
)
def test_the_proxy_is_read_as_curl_reads_it(
    host: str, env: dict[str, str], expected: tuple[str, int] | None
) -> None:
    assert proxy_for("http", host, env) == expected


def test_a_proxy_that_is_not_http_is_refused_with_its_variable_named() -> None:
    with pytest.raises(ApiError, match="HTTPS_PROXY must be an http:// proxy URL"):
        proxy_for("https", "hangar.example", {"https_proxy": "socks5://p:1080"})
