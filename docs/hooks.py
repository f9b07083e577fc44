"""MkDocs hooks: pages that live outside ``docs/`` in the repository.

- ``benchmarks/results/*.md`` (one file per benchmark, the latest run) become ``benchmarks/NAME.md``,
  and ``benchmarks/index.md`` is generated as a table of them, so a new results file shows up in the
  site without editing ``mkdocs.yml``;
- ``CHANGELOG.md`` becomes ``changelog.md``;
- the Sphinx roles of the docstrings (``:meth:`x```, ``:class:`~a.B```) are shown as plain code in
  the API reference, without the role's name.

The files stay where a reader of the repository looks for them; the site renders the same text.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
_ROLE = re.compile(r":(?:py:)?(?:meth|func|class|mod|data|attr|exc|obj|const):<code>~?")


def _title(text: str, fallback: str) -> str:
    for line in text.splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return fallback


def on_files(files: Files, config: Any, **_: Any) -> Files:
    rows = []
    for path in sorted(RESULTS.glob("*.md")):
        text = path.read_text(encoding="utf-8")
        files.append(File.generated(config, f"benchmarks/{path.name}", content=text))
        rows.append(f"| [{_title(text, path.stem)}]({path.name}) | `benchmarks/results/{path.name}` |")
    index = [
        "# Benchmarks",
        "",
        "Each page is the latest run of one benchmark in `benchmarks/`, with its date, commit, machine,",
        "load and command; earlier runs are in the history of `benchmarks/results/` in git.",
        "The benchmarks are not run by CI: each page says how to run it again.",
        "",
        "| benchmark | file in the repository |",
        "|---|---|",
        *rows,
        "",
    ]
    files.append(File.generated(config, "benchmarks/index.md", content="\n".join(index)))
    files.append(File.generated(config, "changelog.md", content=(ROOT / "CHANGELOG.md").read_text(encoding="utf-8")))
    return files


def on_page_content(html: str, **_: Any) -> str:
    return _ROLE.sub("<code>", html)
