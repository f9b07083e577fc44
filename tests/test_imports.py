"""The import structure: plugins import only the published surface, and no module imports itself
back through others.

Both tests read the source with :mod:`ast`, so they see every import, at module level or inside a
function, without importing anything. Imports under ``if TYPE_CHECKING:`` never run and are left
out of the cycle test (they only name types for annotations).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Where each top-level package lives: the core, the built-in plugins, the lean runtime.
SOURCE_ROOTS = (ROOT, ROOT / "plugins", ROOT / "export")
#: What a plugin may import of ptmkit.
PLUGIN_SURFACE = {"ptmkit.api", "ptmkit.testing"}
#: Core modules the tests beside the plugins may still import: none, since ``ptmkit.testing``
#: gives them the core's stages (``CORE_STAGES``). The test fails on an import missing from this
#: list and on an entry no file uses any more, so the list can only shrink.
PENDING_PLUGIN_TEST_IMPORTS: dict[str, set[str]] = {}


def _modules() -> dict[str, Path]:
    """``{dotted module name: file}`` of every module in ``ptmkit``, ``ptmkit_*`` packages."""
    found: dict[str, Path] = {}
    for root in SOURCE_ROOTS:
        for package in sorted(root.iterdir()):
            if not (package / "__init__.py").is_file() or not package.name.startswith("ptmkit"):
                continue
            for file in sorted(package.rglob("*.py")):
                parts = file.relative_to(root).with_suffix("").parts
                if "tests" in parts:
                    continue
                found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = file
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imported_names(tree: ast.AST, package: str, skip_type_checking: bool) -> list[tuple[int, str]]:
    """``(line, dotted name)`` for every import in ``tree``; ``from a import b`` gives ``a.b``
    (a submodule or an attribute: the caller resolves it) and relative imports are made absolute
    against ``package``."""
    names: list[tuple[int, str]] = []

    def visit(node: ast.AST) -> None:
        if skip_type_checking and isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            names.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names.extend((node.lineno, f"{base}.{alias.name}") for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return names


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The module ``name`` is or lies in (``ptmkit.cli.main`` -> ``ptmkit.cli``); None outside."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, set[str]]:
    """``{module: modules it imports}`` over ptmkit, the built-in plugins and ptmkit_export."""
    modules = _modules()
    resolve = functools.partial(_resolve, modules=modules)
    graph: dict[str, set[str]] = {}
    for name, file in modules.items():
        package = name if file.name == "__init__.py" else name.rpartition(".")[0]
        targets = {resolve(imported) for _, imported in _imported_names(ast.parse(file.read_text(), str(file)), package, True)}
        graph[name] = {t for t in targets if t is not None and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def test_no_import_cycles() -> None:
    graph = import_graph()
    assert len(graph) > 50  # the walk found the packages
    found = cycles(graph)
    detail = "; ".join(" <-> ".join(component) + " (" + ", ".join(f"{a} -> {b}" for a in component for b in sorted(graph[a] & set(component))) + ")" for component in found)
    assert not found, f"import cycles: {detail}"


def test_the_cycle_finder_finds_a_cycle_through_a_function_level_import() -> None:
    tree = ast.parse("import ptmkit.b\n\ndef f():\n    from ptmkit.a import x\n")
    imported = [name for _, name in _imported_names(tree, "ptmkit", True)]
    assert imported == ["ptmkit.b", "ptmkit.a.x"]
    assert cycles({"ptmkit.a": {"ptmkit.b"}, "ptmkit.b": {"ptmkit.a"}, "ptmkit.c": {"ptmkit.a"}}) == [["ptmkit.a", "ptmkit.b"]]


def test_the_core_never_imports_the_plugins_or_its_own_public_surface() -> None:
    graph = import_graph()
    for module, targets in graph.items():
        if module.startswith("ptmkit.") or module == "ptmkit":
            plugins = sorted(t for t in targets if t.startswith("ptmkit_") and not t.startswith("ptmkit_export"))
            assert not plugins, f"{module} imports the plugins {plugins}"
            if module not in PLUGIN_SURFACE:
                assert not targets & PLUGIN_SURFACE, f"{module} imports {sorted(targets & PLUGIN_SURFACE)}"


def test_plugins_import_only_the_published_surface() -> None:
    """The built-in plugins (``plugins/``) and the example third-party one (``examples/``), their
    tests included."""
    modules = _modules()
    files = sorted([*(ROOT / "plugins").rglob("*.py"), *(ROOT / "examples").rglob("*.py")])
    assert any(f.parts[-2] == "ptmkit_bert" for f in files) and any(f.parts[-2] == "tests" for f in files)
    assert any(f.parts[-2] == "ptmkit_example" for f in files) and any(f.name == "test_tiny_encoder.py" for f in files)
    offending, pending_used = [], set()
    for file in files:
        relative = file.relative_to(ROOT).as_posix()
        tree = ast.parse(file.read_text(), str(file))
        for line, name in _imported_names(tree, "ptmkit_plugin", skip_type_checking=False):
            if name != "ptmkit" and not name.startswith("ptmkit."):
                continue
            if any(name == allowed or name.startswith(allowed + ".") for allowed in PLUGIN_SURFACE):
                continue
            module = _resolve(name, modules) or name
            if module in PENDING_PLUGIN_TEST_IMPORTS.get(relative, ()):
                pending_used.add((relative, module))
                continue
            offending.append(f"{relative}:{line}: {name}")
    assert not offending, "plugins import ptmkit internals (use ptmkit.api):\n" + "\n".join(offending)
    stale = sorted({(f, m) for f, ms in PENDING_PLUGIN_TEST_IMPORTS.items() for m in ms} - pending_used)
    assert not stale, f"no longer imported: drop them from PENDING_PLUGIN_TEST_IMPORTS: {stale}"
