"""The OpenAPI 3.1 document, built from the route table and the pydantic models' schemas."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from hangar import __version__
from hangar.api.schemas import ErrorView

if TYPE_CHECKING:
    from hangar.api.app import Endpoint

REF = "#/components/schemas/{model}"


def document(endpoints: Sequence[Endpoint]) -> dict[str, Any]:
    schemas: dict[str, Any] = {}

    def ref(model: type[BaseModel]) -> dict[str, str]:
        schema = model.model_json_schema(ref_template=REF)
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
        return {"$ref": REF.format(model=model.__name__)}

    error = {"application/json": {"schema": ref(ErrorView)}}
    paths: dict[str, dict[str, Any]] = {}
    for e in endpoints:
        op: dict[str, Any] = {"summary": e.summary, "security": [{"bearer": []}]}
        params = [p.strip("{}") for p in e.path.split("/") if p.startswith("{")]
        if params:
            op["parameters"] = [
                {"name": p, "in": "path", "required": True, "schema": {"type": "string"}}
                for p in params
            ]
        if e.body is not None:
            op["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": ref(e.body)}},
            }
        ok: dict[str, Any] = {"description": "success"}
        if e.response is not None:
            schema: dict[str, Any] = ref(e.response)
            if e.many:
                schema = {"type": "array", "items": schema}
            ok["content"] = {e.media: {"schema": schema}}
        elif e.status != 204:
            ok["content"] = {e.media: {"schema": {"type": "string"}}}
        op["responses"] = {
            str(e.status): ok,
            "default": {"description": "an error with a stable code", "content": error},
        }
        paths.setdefault(e.path, {})[e.method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "hangar", "version": __version__},
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
