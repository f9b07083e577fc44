"""docs/writing-a-plugin.md cannot rot: its code blocks titled with a file name are that file of
``examples/ptmkit-plugin-example``, in order and complete, and tests/test_plugin_example.py installs
that example and runs it (its contract checks in-process, then train -> finetune -> export ->
predict on the command line). Blank lines are not compared (a block boundary falls on them)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "writing-a-plugin.md"
FENCE = re.compile(r'^```(\w+) title="([^"]+)"\n(.*?)^```$', re.MULTILINE | re.DOTALL)


def titled_blocks(text: str) -> dict[str, list[str]]:
    """``{file: [code of each block titled with it, in order]}``."""
    blocks: dict[str, list[str]] = {}
    for _, title, code in FENCE.findall(text):
        blocks.setdefault(title, []).append(code)
    return blocks


def code_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_the_page_shows_the_whole_example_plugin_as_it_is() -> None:
    blocks = titled_blocks(PAGE.read_text(encoding="utf-8"))
    prefix = "examples/ptmkit-plugin-example/"
    assert set(blocks) == {prefix + "pyproject.toml", prefix + "ptmkit_example/__init__.py", prefix + "tests/test_tiny_encoder.py"}
    for title, codes in blocks.items():
        shown = code_lines("\n".join(codes))
        actual = code_lines((ROOT / title).read_text(encoding="utf-8"))
        first = next((i for i, (a, b) in enumerate(zip(shown, actual, strict=False)) if a != b), min(len(shown), len(actual)))
        assert shown == actual, f"docs/writing-a-plugin.md differs from {title} at code line {first + 1}: page {shown[first:first + 1]}, file {actual[first:first + 1]}"


def test_the_comparison_sees_a_changed_line() -> None:
    page = '```python title="a.py"\nx = 1\n```\n\ntext\n\n```python title="a.py"\n\ny = 2\n```\n'
    assert code_lines("\n".join(titled_blocks(page)["a.py"])) == ["x = 1", "y = 2"]
    assert code_lines("\n".join(titled_blocks(page.replace("y = 2", "y = 3"))["a.py"])) != code_lines("x = 1\n\n\ny = 2\n")
