"""Output schemas: a turn's structured result is checked against the JSON Schema it was given.

A schema is checked before anything starts (:func:`check_schema`, against its own meta-schema:
Draft 2020-12 unless ``$schema`` names another), and a result is validated after the turn
(:func:`validate`). Both answer in one line a person (or the agent, in a repair turn) can act on.
"""

from __future__ import annotations

import json
from typing import Any

from hangar.errors import InvalidSchema

MAX_SCHEMA_BYTES = 64 << 10


def check_schema(schema: Any) -> dict[str, Any]:
    """``schema`` if it is a JSON Schema object; InvalidSchema saying why otherwise."""
    from jsonschema import validators
    from jsonschema.exceptions import SchemaError

    if not isinstance(schema, dict):
        raise InvalidSchema("output_schema must be a JSON Schema object", field="output_schema")
    if len(json.dumps(schema)) > MAX_SCHEMA_BYTES:
        raise InvalidSchema(f"output_schema is over {MAX_SCHEMA_BYTES >> 10} KiB",
                            field="output_schema")  # fmt: skip
    cls = validators.validator_for(schema, default=validators.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "the schema"
        raise InvalidSchema(f"output_schema is not a valid JSON Schema: {exc.message} (at "
                            f"{where})", field="output_schema") from None  # fmt: skip
    return schema


def validate(value: Any, schema: dict[str, Any]) -> str | None:
    """None when ``value`` is valid against ``schema``, else the first error, in one line."""
    from jsonschema import validators

    cls = validators.validator_for(schema, default=validators.Draft202012Validator)
    error = next(iter(sorted(cls(schema).iter_errors(value), key=lambda e: e.path)), None)
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{error.message}" + (f" (at {where})" if where else "")
