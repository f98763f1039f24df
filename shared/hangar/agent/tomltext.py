"""TOML written by hangar: values and whole documents rendered as text, and keys added to a
document's text without touching what is there. Standard library only (``tomllib`` reads TOML;
nothing in the standard library writes it): shipped into sandboxes with :mod:`homeconfig`.

Values render as TOML 1.0: strings as basic strings (every control character escaped), tables
inside values as inline tables, arrays of tables as arrays of inline tables. :func:`dump` writes
a whole document from parsed data (tomllib's types: dict, list, str, int, float, bool and the
datetime types); :func:`with_keys` adds keys to a document's text as new lines (top-level keys
first in the file, the others under new table headers at its end), keeping every byte that was
there. Neither checks its output: the caller parses it again and compares.
"""

import datetime
import math
import re

_BARE = re.compile(r"[A-Za-z0-9_-]+")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f",
            "\r": "\\r"}  # fmt: skip


def string(text):
    """``text`` as a TOML basic string."""
    out = []
    for char in text:
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append("\\u%04X" % ord(char))
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def key(name):
    """A key: bare when it can be, else quoted."""
    if not isinstance(name, str):
        raise ValueError("a TOML key is a string, not %s" % type(name).__name__)
    return name if _BARE.fullmatch(name) else string(name)


def dotted(path):
    return ".".join(key(part) for part in path)


def value(item):
    """A value on one line; ValueError for what TOML cannot hold (null, say)."""
    if isinstance(item, bool):
        return "true" if item else "false"
    if isinstance(item, int):
        return str(item)
    if isinstance(item, float):
        if math.isnan(item):
            return "nan"
        if math.isinf(item):
            return "inf" if item > 0 else "-inf"
        return repr(item)
    if isinstance(item, str):
        return string(item)
    if isinstance(item, (datetime.datetime, datetime.date, datetime.time)):
        return item.isoformat()
    if isinstance(item, list):
        return "[" + ", ".join(value(x) for x in item) + "]"
    if isinstance(item, dict):
        return "{" + ", ".join("%s = %s" % (key(k), value(v)) for k, v in item.items()) + "}"
    raise ValueError("TOML cannot hold %s" % type(item).__name__)


def dump(data):
    """A whole document holding ``data`` (a dict): its tables as ``[headers]``, an empty one
    too, so that parsing the text gives ``data`` back."""
    lines = []
    _table(lines, (), data)
    return "\n".join(lines) + "\n" if lines else ""


def _table(lines, path, table):
    plain = [(k, v) for k, v in table.items() if not isinstance(v, dict)]
    nested = [(k, v) for k, v in table.items() if isinstance(v, dict)]
    if path and (plain or not nested):
        if lines:
            lines.append("")
        lines.append("[%s]" % dotted(path))
    for name, item in plain:
        lines.append("%s = %s" % (key(name), value(item)))
    for name, item in nested:
        _table(lines, path + (name,), item)


def with_keys(text, leaves):
    """``text`` with each ``(path, value)`` of ``leaves`` added as a line of its own: a top-level
    key at the very start (where a line always belongs to the root table), any other under a
    header of its table appended at the end. Valid only where those tables and keys are not in
    ``text`` already; the caller checks."""
    top = ["%s = %s\n" % (key(path[0]), value(item)) for path, item in leaves if len(path) == 1]
    tables = {}
    for path, item in leaves:
        if len(path) > 1:
            tables.setdefault(tuple(path[:-1]), []).append((path[-1], item))
    tail = []
    for parent, items in tables.items():
        tail.append("\n[%s]\n" % dotted(parent))
        tail.extend("%s = %s\n" % (key(name), value(item)) for name, item in items)
    if text and not text.endswith("\n") and tail:
        text += "\n"
    return "".join(top) + text + "".join(tail)
