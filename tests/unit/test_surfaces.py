"""REST (``hangar.api``) and MCP (``hangar.mcp``) are siblings over ``hangar.operations``: read
from the source's imports (every ``import`` and ``from ... import``, relative ones resolved, those
inside functions and ``TYPE_CHECKING`` blocks included), not from what happens to be loaded."""

from __future__ import annotations

import ast
from pathlib import Path

import hangar

ROOT = Path(hangar.__file__).parent


def imports_of(package: str, root: Path = ROOT) -> dict[str, set[str]]:
    """Each module of ``hangar.<package>`` (by its file, relative to hangar's folder ``root``)
    and the modules it imports."""
    found: dict[str, set[str]] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = ["hangar", *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
            parts.append("__init__")  # a package's own level counts from the package itself
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = parts[: len(parts) - node.level] if node.level else []
                module = ".".join([*base, *([node.module] if node.module else [])])
                names.add(module)
                names.update(f"{module}.{alias.name}" for alias in node.names)
        found[str(path.relative_to(root))] = names
    return found


def reaching(package: str, other: str, root: Path = ROOT) -> list[str]:
    """``module: import`` for every import in ``hangar.<package>`` of ``hangar.<other>`` or
    anything in it."""
    target = f"hangar.{other}"
    return sorted(f"{module}: {name}" for module, names in imports_of(package, root).items()
                  for name in names if name == target or name.startswith(target + "."))  # fmt: skip


def test_the_rest_api_imports_nothing_of_mcp() -> None:
    assert reaching("api", "mcp") == []


def test_mcp_imports_nothing_of_the_rest_api() -> None:
    assert reaching("mcp", "api") == []


def test_the_layer_beneath_both_surfaces_imports_neither() -> None:
    assert reaching("operations", "api") == [] and reaching("operations", "mcp") == []


def test_both_surfaces_stand_on_the_operations() -> None:
    assert reaching("api", "operations") and reaching("mcp", "operations")


def test_the_check_finds_an_import_made_relatively_inside_a_function(tmp_path: Path) -> None:
    (tmp_path / "mcp" / "deep").mkdir(parents=True)
    (tmp_path / "mcp" / "deep" / "late.py").write_text(
        "def f() -> None:\n    from ...api import routes\n")  # fmt: skip
    (tmp_path / "mcp" / "__init__.py").write_text("from ..api.app import routes\n")
    (tmp_path / "mcp" / "fine.py").write_text("from . import deep\nimport hangar.apis\n")
    assert reaching("mcp", "api", tmp_path) == [
        "mcp/__init__.py: hangar.api.app", "mcp/__init__.py: hangar.api.app.routes",
        "mcp/deep/late.py: hangar.api", "mcp/deep/late.py: hangar.api.routes",
    ]  # fmt: skip
