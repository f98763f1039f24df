"""The CLI is a client of the REST API: it imports nothing of the server's session service (the
pull archive's reader and ``hangar migrate`` included), its modules import one another without a
circle, and a command loads only what it uses (``session list``: neither the settings' model
nor an HTTP library, the bulk of its time before).

The import graph is read from the source (every import, those inside functions too, but not
those under ``if TYPE_CHECKING``), so a lazy import counts as much as one at the top."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

from tests.cli.conftest import Server

SHARED = Path(__file__).resolve().parents[2] / "shared"
SERVER = "hangar.server"
"""What ``hangar serve`` starts: the server itself, where the graph's walk from the CLI stops."""
SERVER_SIDE = ("hangar.sessions", "hangar.server", "hangar.api", "hangar.mcp")


def modules(root: Path = SHARED) -> dict[str, Path]:
    """Every module of the hangar package under ``root``, by dotted name."""
    found = {}
    for path in sorted((root / "hangar").rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")  # fmt: skip


def imported(name: str, known: dict[str, Path]) -> set[str]:
    """The hangar modules ``name`` imports anywhere in its source, each with the packages above
    it (importing ``a.b.c`` runs ``a`` and ``a.b`` first)."""
    path = known[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def walk(nodes: Iterable[ast.AST]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and _type_checking(node):
                walk(node.orelse)
                continue
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parts, base] if base else parts)
                for alias in node.names:
                    whole = f"{base}.{alias.name}"
                    found.add(whole if whole in known else base)
            walk(ast.iter_child_nodes(node))

    walk(ast.parse(path.read_text()).body)
    with_parents = set()
    for module in found:
        parts = module.split(".")
        with_parents.update(".".join(parts[:n]) for n in range(1, len(parts) + 1))
    return {m for m in with_parents if m in known and m != name}


def reachable(starts: Iterable[str], known: dict[str, Path], stop: str) -> dict[str, str]:
    """Every module reachable from ``starts`` (not through ``stop`` and what is under it), each
    with the module that imports it on the way."""
    via: dict[str, str] = {}
    todo = list(starts)
    while todo:
        module = todo.pop()
        for target in imported(module, known):
            if target == stop or target.startswith(stop + ".") or target in via:
                continue
            via[target] = module
            todo.append(target)
    return via


def chain(module: str, via: dict[str, str]) -> str:
    links = [module]
    while links[-1] in via and not links[-1].startswith("hangar.cli"):
        links.append(via[links[-1]])
    return " <- ".join(links)


def cli_modules(known: dict[str, Path]) -> list[str]:
    return [m for m in known if m == "hangar.cli" or m.startswith("hangar.cli.")]


def test_no_cli_module_reaches_the_session_service_through_its_imports() -> None:
    known = modules()
    via = reachable(cli_modules(known), known, stop=SERVER)
    found = [chain(m, via) for m in sorted(via) if m.split(".")[:2] == ["hangar", "sessions"]]
    assert found == []
    assert "hangar.exchange.pull" in via and "hangar.db.migrations" in via  # the walk sees them


def test_the_cli_modules_import_one_another_without_a_circle() -> None:
    known = modules()
    names = cli_modules(known)
    # A module importing the package it is in is no circle: the package is loaded first anyway.
    edges = {m: {t for t in imported(m, known) if t in names and not m.startswith(t + ".")}
             for m in names}  # fmt: skip
    circles: list[list[str]] = []
    state: dict[str, int] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(edges[module]):
            if state.get(target) == 1:
                circles.append(path[path.index(target):] + [target])
            elif target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in names:
        if module not in state:
            visit(module, [module])
    assert circles == []
    assert "hangar.cli.doctor" in edges["hangar.cli.commands"]  # the walk sees lazy imports


def loaded_by(argv: list[str], env: dict[str, str], tmp_path: Path) -> tuple[int, list[str]]:
    """Run ``hangar ARGV`` in a fresh interpreter; its exit status and the modules it loaded."""
    out = tmp_path / "modules.json"
    code = ("import json, sys\nfrom hangar.cli import main\ncode = main(sys.argv[1:])\n"
            f"open({str(out)!r}, 'w').write(json.dumps(sorted(sys.modules)))\nsys.exit(code)")
    done = subprocess.run([sys.executable, "-c", code, *argv], env=env, capture_output=True,
                          stdin=subprocess.DEVNULL, timeout=60)  # fmt: skip
    return done.returncode, json.loads(out.read_text())


@pytest.mark.parametrize("argv", [["session", "list"], ["env", "list"], ["session", "get", "nope"],
                                  ["session", "send", "nope", "hi"]])  # fmt: skip
def test_a_call_to_the_server_loads_nothing_of_the_server_nor_pydantic_nor_an_http_library(
    server: Server, tmp_path: Path, argv: list[str]
) -> None:
    code, loaded = loaded_by(argv, dict(os.environ), tmp_path)
    assert code == (0 if argv[1] == "list" else 1)  # the others name no session
    assert [m for m in loaded if m.startswith(SERVER_SIDE)] == []
    heavy = ("pydantic", "httpx", "httpcore", "hangar.config", "hangar.models")
    assert [m for m in loaded if m.split(".")[0] in heavy or m in heavy] == []
    assert "hangar.cli.client" in loaded


@pytest.mark.parametrize("argv", [["session", "pull", "nope"], ["migrate"]])
def test_pull_and_migrate_load_nothing_of_the_session_service(
    server: Server, tmp_path: Path, argv: list[str]
) -> None:
    code, loaded = loaded_by(argv, dict(os.environ), tmp_path)
    assert code == (1 if argv[0] == "session" else 0)  # no session nope; migrate works
    assert [m for m in loaded if m.startswith(SERVER_SIDE)] == []
    reader = "hangar.exchange.pull" if argv[0] == "session" else "hangar.db.migrations"
    assert reader in loaded
