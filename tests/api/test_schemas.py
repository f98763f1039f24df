"""An output schema that refers outside itself (a URL, a file, a relative reference) or to
nothing in itself is invalid_schema on new and on send, changes nothing, and fetches nothing
(a real listener counts)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from hangar.models import SessionState
from hangar.runtime import Runtime
from hangar.testing.db import make_session
from tests.api.conftest import add_env
from tests.unit.exchange.test_schemas import Listener


@pytest.fixture
def listener() -> Iterator[Listener]:
    served = Listener()
    yield served
    served.close()


def bad_schemas(url: str) -> list[tuple[dict[str, Any], str]]:
    """Each schema with what its refusal says."""
    outside = "is not inside the schema"
    return [
        ({"$ref": f"{url}/x.json"}, outside),
        ({"type": "object", "properties": {"n": {"$ref": f"{url}/n.json"}}}, outside),
        ({"$ref": "file:///etc/hostname"}, outside),
        ({"$id": f"{url}/root.json", "$ref": "other.json"}, outside),
        ({"$dynamicRef": f"{url}/meta#meta"}, outside),
        ({"$ref": "#/$defs/nope"}, "points to nothing in the schema"),
        ({"$ref": "#"}, "leads back to itself"),
    ]


def test_a_schema_referring_outside_itself_or_to_nothing_is_refused_on_new_and_send(
    api: TestClient, runtime: Runtime, remote: Path, listener: Listener
) -> None:
    add_env(api, remote)
    runtime.db.create_session(make_session("demo", environment="app", harness="antigravity",
                                           state=SessionState.SUSPENDED))  # fmt: skip
    before = api.get("/api/sessions/demo").json()
    for schema, says in bad_schemas(listener.url):
        for path, body in (
            ("/api/sessions", {"name": "other", "message": "hi", "env": "app",
                               "harness": "antigravity", "output_schema": schema}),
            ("/api/sessions/demo/send", {"message": "hi", "output_schema": schema}),
        ):  # fmt: skip
            response = api.post(path, json=body)
            assert response.status_code == 400, (path, schema, response.text)
            error = response.json()["error"]
            assert (error["code"], error["field"]) == ("invalid_schema", "output_schema"), error
            assert says in error["message"], (schema, error)
    assert api.get("/api/sessions/demo").json() == before
    assert [s["name"] for s in api.get("/api/sessions").json()["sessions"]] == ["demo"]
    assert listener.requests == []
