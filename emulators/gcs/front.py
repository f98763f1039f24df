"""The verifying front of fake-gcs-server (which accepts any signature, expired or reused).

Two listeners, each a :class:`~emulators.processes.ThreadedStandIn`:

- the **API port** relays every request unchanged to fake-gcs-server (request and response
  bodies streamed, chunked or not; the resumable upload's ``Location`` rewritten to this port),
  for the control plane's google-cloud-storage client through ``STORAGE_EMULATOR_HOST``;
- the **signed port** serves only V4-signed XML-API requests, path style ``/BUCKET/OBJECT``,
  verified as GCS does (:mod:`emulators.gcs.v4`) against the service accounts given to
  :meth:`GcsFront.trust`. ``GET`` (``Range`` honoured) and ``HEAD`` read the object; ``PUT`` is
  accepted only create-only, with ``x-goog-if-generation-match: 0`` among its signed headers,
  and goes to fake-gcs-server as a single-request upload with ``ifGenerationMatch=0``, so a
  second use of the URL is refused 412 as GCS would. Anything else (other methods, the JSON
  API, unsigned requests, query parameters other than the signature's, other ``x-goog-*``
  headers) is refused; every refusal is GCS's XML error shape and touches nothing.

Standard library plus ``cryptography``.
"""

from __future__ import annotations

import base64
import http.client
import json
import secrets
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from typing import Any, Self
from urllib.parse import quote, unquote, urlsplit

from emulators.gcs.v4 import AUTH_PARAMS, Accounts, XmlError, access_denied, split_query, verify
from emulators.processes import Emulator, StandInServer, ThreadedStandIn

UPSTREAM_SECONDS = 60.0
"""How long a relayed request may wait on fake-gcs-server for each read."""
IDLE_SECONDS = 60.0
"""How long a client connection may sit idle before the front closes it."""
DRAIN_BYTES = 64 << 20
"""The most of a refused request's body the signed port reads before it closes the connection."""
_PIECE = 1 << 16
_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer",
        "upgrade", "expect", "host", "content-length"}  # fmt: skip
_JSON_ROOTS = {"storage", "upload", "download", "batch"}
_GET_HEADERS = {"accept-ranges", "content-length", "content-range", "content-type", "etag",
                "last-modified", "content-encoding", "cache-control"}  # fmt: skip


def _now() -> datetime:
    return datetime.now(UTC)


class _Handler(BaseHTTPRequestHandler):
    """HTTP/1.1 with keep-alive; helpers to read a request body as it streams."""

    protocol_version = "HTTP/1.1"
    timeout = IDLE_SECONDS
    server: _Server
    _consumed = False

    def parse_request(self) -> bool:
        self._consumed = False
        return super().parse_request()

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            super().log_message(format, *args)

    def body_length(self) -> int | None:
        """The request body's length; None when it is chunked."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return None
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise XmlError(400, "InvalidArgument", "Invalid argument.",
                           Details="Content-Length is not a number") from None  # fmt: skip
        if length < 0:
            raise XmlError(400, "InvalidArgument", "Invalid argument.",
                           Details="Content-Length is negative")  # fmt: skip
        return length

    def body(self, length: int | None) -> Iterator[bytes]:
        """The request body in pieces: ``length`` bytes, or the chunks of a chunked body (its
        trailers read and dropped). Raises ConnectionError when the client stops short."""
        self._consumed = True
        if length is not None:
            yield from self._exactly(length)
            return
        while True:
            line = self.rfile.readline(1024)
            try:
                size = int(line.split(b";")[0].strip(), 16)
            except ValueError:
                raise ConnectionError("bad chunk size in a chunked body") from None
            if size == 0:
                while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass
                return
            yield from self._exactly(size)
            self.rfile.readline(8)

    def _exactly(self, size: int) -> Iterator[bytes]:
        """The next ``size`` bytes of the body in pieces; ConnectionError if it ends sooner."""
        left = size
        while left:
            piece = self.rfile.read(min(left, _PIECE))
            if not piece:
                raise ConnectionError("the request body ended early")
            left -= len(piece)
            yield piece

    def send_xml_error(self, error: XmlError) -> None:
        data = error.body()
        self.send_response(error.status)
        self.send_header("Content-Type", "application/xml; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def relay_response(self, response: http.client.HTTPResponse,
                       headers: list[tuple[str, str]]) -> None:  # fmt: skip
        """Send ``response``'s status, ``headers`` and body (streamed; chunked when the length
        is not known)."""
        self.send_response(response.status, response.reason)
        for name, value in headers:
            self.send_header(name, value)
        length = response.getheader("Content-Length")
        no_body = self.command == "HEAD" or response.status in (204, 304) or response.status < 200
        if length is not None:
            self.send_header("Content-Length", length)
        elif not no_body:
            self.send_header("Transfer-Encoding", "chunked")
        elif self.command != "HEAD":
            self.send_header("Content-Length", "0")
        self.end_headers()
        if no_body:
            return
        while piece := response.read(_PIECE):
            self.wfile.write(piece if length is not None else b"%x\r\n%s\r\n" % (len(piece), piece))
        if length is None:
            self.wfile.write(b"0\r\n\r\n")


def _send_body(conn: http.client.HTTPConnection, pieces: Iterator[bytes], chunked: bool) -> None:
    for piece in pieces:
        conn.send(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
    if chunked:
        conn.send(b"0\r\n\r\n")


class _Server(StandInServer):

    def __init__(self, address: tuple[str, int], handler: type[_Handler], upstream: str,
                 accounts: Accounts, now: Callable[[], datetime], verbose: bool,
                 served: list[tuple[str, str]]) -> None:  # fmt: skip
        super().__init__(address, handler)
        self.served = served
        parts = urlsplit(upstream)
        self.upstream = upstream.rstrip("/")
        self.upstream_host = parts.hostname or "127.0.0.1"
        self.upstream_port = parts.port or 80
        self.verbose = verbose
        self.accounts = accounts
        self.now = now

    def connect(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.upstream_host, self.upstream_port,
                                          timeout=UPSTREAM_SECONDS)  # fmt: skip


class _RelayHandler(_Handler):
    """Every method, relayed unchanged (but for hop-by-hop headers and ``Host``)."""

    def relay(self) -> None:
        server = self.server
        try:
            length = self.body_length()
        except XmlError as exc:
            self.send_xml_error(exc)
            return
        conn = server.connect()
        try:
            conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            conn.putheader("Host", f"{server.upstream_host}:{server.upstream_port}")
            for name, value in self.headers.items():
                if name.lower() not in _HOP:
                    conn.putheader(name, value)
            if length is None:
                conn.putheader("Transfer-Encoding", "chunked")
            elif length or self.command in ("POST", "PUT", "PATCH"):
                conn.putheader("Content-Length", str(length))
            conn.endheaders()
            _send_body(conn, self.body(length), chunked=length is None)
            response = conn.getresponse()
            host, port = server.server_address[:2]
            ours = f"http://{self.headers.get('Host') or f'{host!s}:{port}'}"
            headers = []
            for name, value in response.getheaders():
                if name.lower() in _HOP:
                    continue
                if name.lower() == "location" and value.startswith(server.upstream):
                    value = ours + value[len(server.upstream) :]
                headers.append((name, value))
            self.relay_response(response, headers)
        except (OSError, http.client.HTTPException) as exc:
            self.log_error("relay failed: %s", exc)
            self.close_connection = True
        finally:
            conn.close()

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = relay


class _SignedHandler(_Handler):
    """V4-signed ``GET``/``HEAD``/``PUT`` of ``/BUCKET/OBJECT``; everything else refused."""

    def handle_signed(self) -> None:
        try:
            bucket, name, query = self._target()
            if self.command not in ("GET", "HEAD", "PUT"):
                raise access_denied(f"{self.command} is not served on signed URLs by this front.")
            headers: dict[str, str] = {}
            for key, value in self.headers.items():
                key = key.lower()
                headers[key] = f"{headers[key]},{value}" if key in headers else value
            path = f"/{bucket}/{name}"
            verified = verify(self.command, path, query, headers, self.server.accounts,
                              self.server.now())  # fmt: skip
            extra = [k for k, _ in split_query(query) if k not in AUTH_PARAMS]
            if extra:
                raise access_denied(f"The query parameter {extra[0]} is not served by this front.")
            precondition = verified.headers.get("x-goog-if-generation-match")
            if self.command == "PUT":
                if precondition != "0":
                    raise access_denied("This front accepts only create-only uploads: sign "
                                        "x-goog-if-generation-match: 0 into the URL.")  # fmt: skip
                self._put(bucket, name)
                self.server.served.append((self.command, f"{bucket}/{name}"))
            else:
                if precondition is not None:
                    raise XmlError(501, "NotImplemented", "A request header you provided "
                                   "implies functionality that is not implemented.")  # fmt: skip
                self._get(bucket, name)
                self.server.served.append((self.command, f"{bucket}/{name}"))
        except XmlError as exc:
            self._drain()
            self.send_xml_error(exc)
        except (OSError, http.client.HTTPException) as exc:
            self.log_error("signed request failed: %s", exc)
            self.close_connection = True

    def _drain(self) -> None:
        """Read and drop what is left of a refused request's body (up to DRAIN_BYTES), so the
        client, still sending, reads the refusal rather than a reset connection."""
        if self._consumed:
            return
        self._consumed = True
        try:
            length = self.body_length()
            if length is not None and length > DRAIN_BYTES:
                self.close_connection = True
                return
            seen = 0
            for piece in self.body(length):
                seen += len(piece)
                if seen > DRAIN_BYTES:
                    self.close_connection = True
                    return
        except (XmlError, ConnectionError, OSError):
            self.close_connection = True

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = do_PATCH = do_OPTIONS = handle_signed

    def _target(self) -> tuple[str, str, str]:
        raw_path, _, query = self.path.partition("?")
        try:
            path = unquote(raw_path, errors="strict")
        except UnicodeDecodeError:
            raise XmlError(400, "InvalidURI", "Couldn't parse the specified URI.") from None
        bucket, _, name = path[1:].partition("/")
        if not path.startswith("/") or bucket in _JSON_ROOTS or not bucket or not name:
            raise access_denied("Only signed XML-API object requests (/BUCKET/OBJECT) are served "
                                "on this port.")  # fmt: skip
        return bucket, name, query

    def _get(self, bucket: str, name: str) -> None:
        conn = self.server.connect()
        try:
            headers = {"Host": f"{self.server.upstream_host}:{self.server.upstream_port}"}
            if "Range" in self.headers:
                headers["Range"] = self.headers["Range"]
            conn.request(self.command, f"/{quote(bucket, safe='')}/{quote(name, safe='/~')}",
                         headers=headers)  # fmt: skip
            response = conn.getresponse()
            if response.status == 404:
                response.read()
                raise XmlError(404, "NoSuchKey", "The specified key does not exist.")
            if response.status == 416:
                response.read()
                raise XmlError(416, "InvalidRange", "The requested range cannot be satisfied.")
            if response.status >= 300:
                response.read()
                raise XmlError(502, "InternalError", f"fake-gcs-server answered {response.status}")
            kept = [(k, v) for k, v in response.getheaders()
                    if k.lower() in _GET_HEADERS - {"content-length"}
                    or k.lower().startswith("x-goog-")]  # fmt: skip
            self.relay_response(response, kept)
        finally:
            conn.close()

    def _put(self, bucket: str, name: str) -> None:
        length = self.body_length()
        if length is None and "Transfer-Encoding" not in self.headers:
            raise XmlError(411, "MissingContentLength", "You must provide the Content-Length "
                           "HTTP header.")  # fmt: skip
        boundary = secrets.token_hex(24)
        content_type = self.headers.get("Content-Type") or "application/octet-stream"
        meta = json.dumps({"name": name, "contentType": content_type})
        head = (f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n{meta}\r\n"
                f"--{boundary}\r\nContent-Type: {content_type}\r\n\r\n").encode()  # fmt: skip
        tail = f"\r\n--{boundary}--\r\n".encode()
        conn = self.server.connect()
        try:
            conn.putrequest("POST", f"/upload/storage/v1/b/{quote(bucket, safe='')}/o"
                            "?uploadType=multipart&ifGenerationMatch=0", skip_host=True,
                            skip_accept_encoding=True)  # fmt: skip
            conn.putheader("Host", f"{self.server.upstream_host}:{self.server.upstream_port}")
            conn.putheader("Content-Type", f"multipart/related; boundary={boundary}")
            if length is None:
                conn.putheader("Transfer-Encoding", "chunked")
            else:
                conn.putheader("Content-Length", str(len(head) + length + len(tail)))
            conn.endheaders()
            _send_body(conn, _framed(head, self.body(length), tail), chunked=length is None)
            response = conn.getresponse()
            data = response.read()
        finally:
            conn.close()
        self._answer_put(response.status, data, bucket)

    def _answer_put(self, status: int, data: bytes, bucket: str) -> None:
        if status == 412:
            raise XmlError(412, "PreconditionFailed", "At least one of the pre-conditions you "
                           "specified did not hold.", Details="Precondition Failed")  # fmt: skip
        if status == 404:
            raise XmlError(404, "NoSuchBucket", "The specified bucket does not exist.",
                           Details=f"Bucket {bucket} does not exist")  # fmt: skip
        if status != 200:
            raise XmlError(502, "InternalError", f"fake-gcs-server answered {status}")
        doc = json.loads(data)
        md5 = base64.b64decode(doc.get("md5Hash", "")).hex()
        self.send_response(200)
        self.send_header("ETag", f'"{md5}"')
        self.send_header("x-goog-generation", str(doc.get("generation", "")))
        self.send_header("x-goog-metageneration", str(doc.get("metageneration", "1")))
        hashes = f"crc32c={doc.get('crc32c', '')},md5={doc.get('md5Hash', '')}"
        self.send_header("x-goog-hash", hashes)
        self.send_header("x-goog-stored-content-length", str(doc.get("size", "")))
        self.send_header("Content-Length", "0")
        self.end_headers()


def _framed(head: bytes, body: Iterator[bytes], tail: bytes) -> Iterator[bytes]:
    yield head
    yield from body
    yield tail


class _Listener(ThreadedStandIn):
    def __init__(self, label: str, handler: type[_Handler], front: GcsFront, host: str,
                 port: int, verbose: bool) -> None:  # fmt: skip
        super().__init__(host, port, verbose=verbose)
        self.label = label
        self._handler = handler
        self._front = front

    def make_server(self) -> _Server:
        front = self._front
        return _Server((self.host, self.port), self._handler, front.upstream, front.accounts,
                       lambda: front.now(), self.verbose, front.served)  # fmt: skip


class GcsFront(Emulator):
    """The two listeners in front of the fake-gcs-server at ``upstream`` (``http://H:P``).

    ``GcsFront(upstream, host="127.0.0.1", api_port=0, signed_port=0).start()`` binds both
    (port 0: a free one); :attr:`api_url` and :attr:`signed_url` give them. Trust a signer with
    :meth:`trust` (before or after start); a signature by any other account is refused.
    :attr:`now` is the clock expiry is judged by (tests may replace it); :attr:`served`
    lists the signed requests it answered."""

    def __init__(self, upstream: str, host: str = "127.0.0.1", api_port: int = 0,
                 signed_port: int = 0, *, verbose: bool = False) -> None:  # fmt: skip
        self.upstream = upstream
        self.accounts = Accounts()
        self.now: Callable[[], datetime] = _now
        self.served: list[tuple[str, str]] = []
        """(method, ``BUCKET/OBJECT``) of every signed request answered, in order (list
        appends are atomic, so concurrent requests need no lock)."""
        self.api = _Listener("gcs front (api)", _RelayHandler, self, host, api_port, verbose)
        self.signed = _Listener("gcs front (signed)", _SignedHandler, self, host, signed_port,
                                verbose)  # fmt: skip

    @property
    def api_url(self) -> str:
        """Where google-cloud-storage clients go (``STORAGE_EMULATOR_HOST``)."""
        return self.api.url

    @property
    def signed_url(self) -> str:
        """Where signed URLs point (the signer's ``api_access_endpoint``)."""
        return self.signed.url

    def trust(self, email: str, public_key_pem: str | bytes) -> None:
        """Accept V4 signatures by the service account ``email`` made with the private half of
        ``public_key_pem`` (PEM); ValueError for a key that is not RSA."""
        self.accounts.trust(email, public_key_pem)

    def start(self) -> Self:
        self.api.start()
        try:
            self.signed.start()
        except OSError:
            self.api.stop()
            raise
        return self

    def stop(self) -> None:
        self.signed.stop()
        self.api.stop()
