"""No function in ptmkit/, plugins/ or export/ runs past 80 lines (the benchmarks may): a reader
follows each one top-down (issue "The house")."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 80


def long_functions(root: Path = ROOT, tops: tuple[str, ...] = ("ptmkit", "plugins", "export")) -> list[str]:
    """``path:line name (N lines)`` of every function or method longer than :data:`LIMIT` lines,
    its nested functions counted in it (``end_lineno - lineno + 1``, decorators left out)."""
    found = []
    for top in tops:
        for path in sorted((root / top).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    length = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                    if length > LIMIT:
                        found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_no_function_runs_past_80_lines() -> None:
    assert long_functions() == []


def test_the_count_sees_a_long_method_with_its_nested_functions(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    body = "            x = 1\n" * (LIMIT - 4)
    source = f"def short():\n    return 1\n\n\nclass A:\n    async def long(self):\n        def inner():\n{body}            return 2\n        return inner\n"
    (package / "mod.py").write_text(source, encoding="utf-8")
    assert long_functions(tmp_path, ("pkg",)) == []  # 80 lines: at the limit
    (package / "mod.py").write_text(source.replace("        return inner\n", "        y = 2\n        return inner\n"), encoding="utf-8")
    assert long_functions(tmp_path, ("pkg",)) == [f"pkg{'/'}mod.py:6 long ({LIMIT + 1} lines)"]
