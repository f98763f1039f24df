"""Output schemas name only their own parts: a reference that is not a fragment resolving inside
the schema is refused before anything starts, and validating a result never fetches anything,
whatever schema was stored (a real HTTP listener counts the requests it gets)."""

from __future__ import annotations

import http.server
import threading
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from hangar.errors import InvalidSchema
from hangar.exchange.schemas import check_schema, validate


class Listener:
    """A real HTTP server on the loopback that answers every GET with a schema, and counts."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        seen = self.requests

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
                seen.append(self.path)
                body = b'{"type": "integer"}'
                self.send_response(200)
                self.send_header("Content-Type", "application/schema+json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,),
                                       daemon=True)  # fmt: skip
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


@pytest.fixture
def listener() -> Iterator[Listener]:
    served = Listener()
    yield served
    served.close()


def remote_schemas(url: str) -> list[dict[str, Any]]:
    """Schemas whose validation would fetch ``url`` (or a file) if anything were fetched."""
    return [
        {"$ref": f"{url}/x.json"},
        {"type": "object", "properties": {"n": {"$ref": f"{url}/n.json"}}},
        {"$ref": "file:///etc/hostname"},
        {"$id": f"{url}/root.json", "$ref": "other.json"},  # relative, resolved by $id
        {"$defs": {"a": {"$id": f"{url}/a.json", "$ref": "b.json"}}, "$ref": "#/$defs/a"},
        {"$dynamicRef": f"{url}/meta#meta"},
        {"$schema": "https://json-schema.org/draft/2019-09/schema", "$recursiveRef": f"{url}/"},
        {"$schema": "http://json-schema.org/draft-07/schema#",
         "properties": {"n": {"$ref": f"{url}/n"}}},
    ]


DANGLING = [
    {"$ref": "#/$defs/nope"},
    {"$defs": {"a": {"type": "string"}}, "properties": {"n": {"$ref": "#/$defs/b"}}},
    {"$ref": "#nope"},  # no such anchor
    {"$dynamicRef": "#meta"},  # no such dynamic anchor
    {"$id": "http://example.com/root", "$defs": {"a": {"$id": "sub", "$ref": "#/$defs/x"}},
     "properties": {"n": {"$ref": "#/$defs/a"}}},  # x is not in sub, whose fragment it names
]


def test_a_reference_outside_the_schema_is_invalid_schema_and_nothing_is_fetched(
    listener: Listener,
) -> None:
    for schema in [*remote_schemas(listener.url), {"$ref": "other.json"}, {"$ref": ""}]:
        with pytest.raises(InvalidSchema, match="is not inside the schema") as refused:
            check_schema(schema)
        assert refused.value.data["field"] == "output_schema"
    assert listener.requests == []


def test_a_dangling_local_reference_or_one_that_loops_is_invalid_schema() -> None:
    for schema in DANGLING:
        with pytest.raises(InvalidSchema, match="points to nothing in the schema"):
            check_schema(schema)
    loops = [{"$ref": "#"}, {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
                              "properties": {"n": {"$ref": "#/$defs/a"}}}]  # fmt: skip
    for schema in loops:
        with pytest.raises(InvalidSchema, match="leads back to itself"):
            check_schema(schema)
    with pytest.raises(InvalidSchema, match="must be a string"):
        check_schema({"$schema": "http://json-schema.org/draft-04/schema#", "$ref": 5})


def test_references_inside_the_schema_are_accepted_and_used() -> None:
    tree = {"$defs": {"node": {"type": "object", "properties": {
        "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}}, "$ref": "#/$defs/node"}
    accepted: list[dict[str, Any]] = [
        tree,
        {"$defs": {"n": {"$anchor": "count", "type": "integer"}}, "properties": {
            "n": {"$ref": "#count"}}},
        {"$id": "https://example.com/s.json", "$defs": {"n": {"type": "integer"}},
         "properties": {"n": {"$ref": "#/$defs/n"}}},
        {"$dynamicAnchor": "meta", "type": "object", "properties": {"m": {"$dynamicRef": "#meta"}}},
        {"$schema": "http://json-schema.org/draft-07/schema#", "definitions": {"s": {
            "type": "string"}}, "items": {"$ref": "#/definitions/s"}},
        {"const": {"$ref": "http://127.0.0.1:9/x"}},  # data, not a reference
        {"properties": {"again": {"$ref": "#"}}},  # recursion through a property ends
    ]  # fmt: skip
    for schema in accepted:
        assert check_schema(schema) is schema
    assert validate({"kids": [{"kids": []}]}, tree) is None
    assert validate({"kids": [{"kids": 1}]}, tree) == "1 is not of type 'array' (at kids/0/kids)"
    assert validate({"$ref": "http://127.0.0.1:9/x"}, accepted[5]) is None


def test_validating_against_a_stored_schema_never_fetches_and_says_it_cannot_be_applied(
    listener: Listener,
) -> None:
    """An older hangar stored schemas unchecked: validating against them is an error of the
    schema (InvalidSchema), never a fetch, never another exception."""
    stored = [*remote_schemas(listener.url), *DANGLING, {"$ref": "#"}]
    for schema in stored:
        with pytest.raises(InvalidSchema, match="the output schema cannot be applied"):
            validate({"n": 1}, schema)
    assert listener.requests == []
    # the listener does count: a fetch made on purpose is seen
    with urllib.request.urlopen(f"{listener.url}/x.json", timeout=10) as answer:
        assert answer.read() == b'{"type": "integer"}'
    assert listener.requests == ["/x.json"]
