"""The OpenAPI 3.1 document, built from the route table and the pydantic models' JSON schemas
(which are JSON Schema 2020-12, as OpenAPI 3.1 uses)."""

from __future__ import annotations

import re

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from hangar import __version__
from hangar.api import terminal
from hangar.api.routes import JSON, Endpoint, Query
from hangar.operations.wire import ErrorView

REF = "#/components/schemas/{model}"


def document(endpoints: Sequence[Endpoint]) -> dict[str, Any]:
    schemas: dict[str, Any] = {}

    def ref(model: type[BaseModel]) -> dict[str, str]:
        schema = model.model_json_schema(ref_template=REF)
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
        return {"$ref": REF.format(model=model.__name__)}

    errors = {"description": "an error with a stable code",
              "content": {JSON: {"schema": ref(ErrorView)}}}  # fmt: skip
    paths: dict[str, dict[str, Any]] = {}
    for e in endpoints:
        op: dict[str, Any] = {"summary": e.summary, "security": [{"bearer": []}]}
        if parameters := _parameters(e.path, e.query):
            op["parameters"] = parameters
        if e.body is not None:
            op["requestBody"] = {"required": True, "content": {JSON: {"schema": ref(e.body)}}}
        elif e.raw_body is not None:
            op["requestBody"] = {"required": True, "content": {
                e.raw_body: {"schema": {"type": "string", "format": "binary"}}}}
        ok: dict[str, Any] = {"description": "success"}
        if e.response is not None:
            schema: dict[str, Any] = ref(e.response)
            if e.many:
                schema = {"type": "array", "items": schema}
            ok["content"] = {JSON: {"schema": schema}}
            if e.media != JSON:  # text by default, the model as JSON when a query asks for it
                ok["content"] = {e.media: {"schema": {"type": "string"}}, **ok["content"]}
        elif e.status != 204:
            ok["content"] = {e.media: {"schema": {"type": "string"}}}
        op["responses"] = {str(e.status): ok, "default": errors}
        paths.setdefault(_documented(e.path), {})[e.method.lower()] = op
    paths[terminal.PATH] = {"get": {
        "summary": terminal.SUMMARY,
        "security": [],  # the ticket in the query is the credential, never the bearer token
        "parameters": _parameters(terminal.PATH, terminal.QUERY),
        "responses": {"101": {"description": "switching to the websocket"}, "default": errors},
    }}  # fmt: skip
    paths["/mcp"] = {"post": {
        "summary": "MCP, streamable HTTP (stateless, SSE answers): the session tools and "
                   "artifacts as resources; see docs/exchange.md. Other methods: 405",
        "security": [{"bearer": []}],
        "responses": {"200": {"description": "a JSON-RPC answer, as an SSE stream or JSON"},
                      "default": errors},
    }}  # fmt: skip
    paths["/api/openapi.json"] = {"get": {
        "summary": "This document (no token needed)",
        "responses": {"200": {"description": "OpenAPI 3.1",
                              "content": {JSON: {"schema": {"type": "object"}}}}},
    }}  # fmt: skip
    return {
        "openapi": "3.1.0",
        "info": {"title": "hangar", "version": __version__,
                 "description": "Sessions of coding agents whose work survives the sandbox."},
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }  # fmt: skip


def _documented(path: str) -> str:
    """A route's path as OpenAPI writes it: ``{path:path}`` (a converter) is ``{path}``."""
    return re.sub(r"\{(\w+):\w+\}", r"{\1}", path)


def _parameters(path: str, query: Sequence[Query]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {"name": p.strip("{}").split(":")[0], "in": "path", "required": True, "schema": {"type": "string"}}
        for p in path.split("/")
        if p.startswith("{")
    ]
    out += [
        {"name": q.name, "in": "query", "required": False, "description": q.description,
         "schema": {"type": q.type}}
        for q in query
    ]  # fmt: skip
    return out
