"""Wire-level helpers of the stand-in: Kubernetes ``Status`` documents, label selectors and
the three patch formats.

- :func:`status_doc` is the ``Status`` every error answers with (``kind: Status``,
  ``apiVersion: v1``, ``status: Failure``, ``message``, ``reason``, ``code``, ``details``).
- :func:`selector` parses a label selector: equality (``a=b``, ``a==b``, ``a!=b``),
  set-based (``a in (x,y)``, ``a notin (x)``), existence (``a``, ``!a``); comma means AND.
- :func:`apply_patch` applies a JSON merge patch (RFC 7386; also used for strategic merge
  patches, which the stand-in treats as merge patches: lists replace) or a JSON patch
  (RFC 6902: add, replace, remove, test).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

from .store import StoreError

Labels = dict[str, str]


def status_doc(
    code: int, reason: str, message: str, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A failure ``Status`` document."""
    doc: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                           "status": "Failure", "message": message, "reason": reason,
                           "code": code}  # fmt: skip
    if details:
        doc["details"] = details
    return doc


_TERM = re.compile(
    r"^\s*(?P<neg>!)?\s*(?P<key>[A-Za-z0-9._/-]+)\s*"
    r"(?:(?P<op>==|=|!=)\s*(?P<value>[A-Za-z0-9._-]*)"
    r"|\s(?P<setop>in|notin)\s*\((?P<values>[^)]*)\))?\s*$"
)


def _split_terms(text: str) -> list[str]:
    terms, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            terms.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        terms.append(cur)
    return terms


def selector(text: str | None) -> Callable[[Labels], bool]:
    """A predicate on a label map; raises StoreError 400 BadRequest on a malformed selector."""
    tests: list[Callable[[Labels], bool]] = []
    for term in _split_terms(text or ""):
        m = _TERM.match(term)
        if m is None or (m["neg"] and (m["op"] or m["setop"])):
            raise StoreError(400, "BadRequest", f"unable to parse requirement: {term.strip()!r}")
        tests.append(_requirement(m))

    def match(labels: Labels) -> bool:
        return all(test(labels) for test in tests)

    return match


def _requirement(m: re.Match[str]) -> Callable[[Labels], bool]:
    key, neg = m["key"], bool(m["neg"])
    if m["op"]:
        value, equal = m["value"], m["op"] != "!="
        return lambda lb: (lb.get(key) == value) == equal
    if m["setop"]:
        values = {v.strip() for v in m["values"].split(",") if v.strip()}
        if m["setop"] == "in":
            return lambda lb: key in lb and lb[key] in values
        return lambda lb: lb.get(key) not in values
    return lambda lb: (key in lb) != neg


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise StoreError(422, "Invalid", f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def json_patch(doc: Any, ops: list[dict[str, Any]]) -> Any:
    """RFC 6902 add, replace, remove and test; StoreError 422 when an op cannot apply."""
    doc = copy.deepcopy(doc)
    for op in ops:
        parts = _pointer(str(op.get("path", "")))
        if not parts:
            raise StoreError(422, "Invalid", "cannot patch the whole document")
        parent: Any = doc
        try:
            for part in parts[:-1]:
                parent = parent[int(part)] if isinstance(parent, list) else parent[part]
            last = parts[-1]
            name = op.get("op")
            if isinstance(parent, list):
                index = len(parent) if last == "-" else int(last)
                if name == "add":
                    parent.insert(index, op["value"])
                elif name == "replace":
                    parent[index] = op["value"]
                elif name == "remove":
                    del parent[index]
                elif name == "test" and parent[index] != op.get("value"):
                    raise StoreError(422, "Invalid", f"test failed at {op['path']}")
            elif name in ("add", "replace"):
                if name == "replace" and last not in parent:
                    raise KeyError(last)
                parent[last] = op["value"]
            elif name == "remove":
                del parent[last]
            elif name == "test" and parent.get(last) != op.get("value"):
                raise StoreError(422, "Invalid", f"test failed at {op['path']}")
            elif name not in ("test",):
                raise StoreError(422, "Invalid", f"unsupported JSON patch op {name!r}")
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            where = op.get("path")
            raise StoreError(422, "Invalid", f"JSON patch op cannot apply at {where}: {exc}") from exc
    return doc


def apply_patch(content_type: str, doc: Any, patch: Any) -> Any:
    """Apply ``patch`` sent with ``content_type``; StoreError 415 for an unknown patch type."""
    kind = content_type.split(";")[0].strip().lower()
    if kind == "application/json-patch+json":
        if not isinstance(patch, list):
            raise StoreError(400, "BadRequest", "a JSON patch must be a list of operations")
        return json_patch(doc, patch)
    if kind in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
        if not isinstance(patch, dict):
            raise StoreError(400, "BadRequest", "a merge patch must be an object")
        return merge_patch(doc, patch)
    raise StoreError(415, "UnsupportedMediaType",
                     "the body of the request was in an unknown format - accepted media types include: "
                     "application/json-patch+json, application/merge-patch+json, "
                     "application/strategic-merge-patch+json")  # fmt: skip
