"""Output schemas: a turn's structured result is checked against the JSON Schema it was given.

A schema is checked before anything starts (:func:`check_schema`): against its own meta-schema
(Draft 2020-12 unless ``$schema`` names another), and its references: every ``$ref``,
``$dynamicRef`` and ``$recursiveRef`` must be a fragment (``#``, ``#/a/json/pointer`` or
``#anchor``) that resolves inside the schema itself, and no chain of ``$ref`` may lead back to
where it started (validating would never end). A reference to anything else (``http:``,
``file:``, a relative URL, even one an ``$id`` would resolve to a part of the schema) is
refused: nothing is ever fetched. A result is validated after the turn (:func:`validate`) with a
registry whose retrieval raises, so even a schema stored by an older hangar, before these
checks, can never make the control plane fetch a URL. Both answer in one line a person (or the
agent, in a repair turn) can act on.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from hangar.errors import InvalidSchema

if TYPE_CHECKING:
    from referencing import Registry, Resource

logger = logging.getLogger(__name__)

MAX_SCHEMA_BYTES = 64 << 10
REFERENCES = ("$ref", "$dynamicRef", "$recursiveRef")
"""The keywords that refer to another schema: each must be a fragment resolving inside the
schema."""


def check_schema(schema: Any) -> dict[str, Any]:
    """``schema`` if it is a JSON Schema object whose references all resolve inside it;
    InvalidSchema saying why otherwise."""
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
    _check_references(schema)
    return schema


def _refuse(uri: str) -> Resource[Any]:
    """A registry's retrieval that retrieves nothing: a schema may only name its own parts."""
    from referencing.exceptions import NoSuchResource

    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]


def _registry() -> Registry[Any]:
    """An empty registry that refuses retrieval (what :func:`_refuse` says)."""
    from referencing import Registry

    return Registry(retrieve=_refuse)  # type: ignore[call-arg]


def _check_references(schema: dict[str, Any]) -> None:
    """Every reference keyword in a schema position (never in data such as ``const`` or
    ``enum``) is a fragment that resolves inside ``schema``, and following ``$ref`` from any of
    them ends; InvalidSchema otherwise. Walks the schema's subschemas as its dialect defines
    them (``referencing``), each with the base URI its ``$id`` gives it."""
    from referencing import Resource
    from referencing.exceptions import Unresolvable
    from referencing.jsonschema import DRAFT202012

    root: Resource[Any] = Resource.from_contents(schema, default_specification=DRAFT202012)
    base = root.id() or ""
    resolver = _registry().with_resource(base, root).resolver(base)
    ending: set[int] = set()  # subschemas known to reach a schema without $ref
    stack = [(resolver, root)]
    while stack:
        outer, resource = stack.pop()
        here = outer.in_subresource(resource)
        stack.extend((here, sub) for sub in resource.subresources())
        if not isinstance(resource.contents, dict):
            continue  # true or false
        for keyword in REFERENCES:
            if keyword not in resource.contents:
                continue
            ref = resource.contents[keyword]
            if not isinstance(ref, str):
                raise InvalidSchema(f"output_schema's {keyword} must be a string, not "
                                    f"{json.dumps(ref)[:100]}", field="output_schema")  # fmt: skip
            if not ref.startswith("#"):
                raise InvalidSchema(
                    f"output_schema's {keyword} {ref[:200]!r} is not inside the schema: only "
                    "references to its own parts ('#', '#/json/pointer', '#anchor') are "
                    "allowed, and nothing is ever fetched", field="output_schema")  # fmt: skip
            try:
                target = here.lookup(ref)
            except Unresolvable:
                raise InvalidSchema(f"output_schema's {keyword} {ref[:200]!r} points to "
                                    "nothing in the schema", field="output_schema") from None  # fmt: skip
            if keyword == "$ref":
                _follow(resource.contents, target, ending)


def _follow(start: dict[str, Any], target: Any, ending: set[int]) -> None:
    """Follow ``$ref`` from ``start`` (whose ``$ref`` is resolved as ``target``) until a
    schema without one; InvalidSchema when it comes back to a schema already on the way. A
    ``$ref`` on the way that is not a fragment or does not resolve ends the chain here (the
    walk refuses it in its own right). ``ending`` remembers the schemas known to end, so the
    whole walk stays linear."""
    from referencing.exceptions import Unresolvable

    path = [id(start)]
    while isinstance(target.contents, dict) and isinstance(target.contents.get("$ref"), str):
        ref = target.contents["$ref"]
        if id(target.contents) in ending or not ref.startswith("#"):
            break
        if id(target.contents) in path:
            raise InvalidSchema(f"output_schema's $ref {start['$ref'][:200]!r} leads back to "
                                "itself: validating against it would never end",
                                field="output_schema")  # fmt: skip
        path.append(id(target.contents))
        try:
            target = target.resolver.lookup(ref)
        except Unresolvable:
            break
    ending.update(path)


def validate(value: Any, schema: dict[str, Any]) -> str | None:
    """None when ``value`` is valid against ``schema``, else the first error, in one line.
    InvalidSchema when the schema cannot be applied (a reference that does not resolve, a
    regular expression Python refuses, anything the validator raises): never retrieves
    anything."""
    from jsonschema import validators

    cls = validators.validator_for(schema, default=validators.Draft202012Validator)
    try:
        validator = cls(schema, registry=_registry())
        error = next(iter(sorted(validator.iter_errors(value), key=lambda e: e.path)), None)
    except Exception as exc:  # the validator on a stored schema and the agent's value: any
        # failure of its own is the schema's, never the finish's (logged in one line: a
        # recursion's traceback would be thousands)
        said = " ".join(str(exc).split())[:300] or type(exc).__name__
        logger.warning("an output schema could not be applied (%s): %s", type(exc).__name__, said)
        raise InvalidSchema(f"the output schema cannot be applied: {said}",
                            field="output_schema") from None  # fmt: skip
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{error.message}" + (f" (at {where})" if where else "")
