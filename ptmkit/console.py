"""The rich consoles ptmkit prints to: progress and reports on stderr, results on stdout."""

from __future__ import annotations

import sys

from rich.console import Console

# Off a terminal (CI logs, files) rich assumes 80 columns, which folds tables; logs can be wider.
LOG_WIDTH = 140


def default_console(stderr: bool = True) -> Console:
    """A console for ``stderr`` (progress, reports) or stdout (results)."""
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else LOG_WIDTH
    return Console(stderr=stderr, highlight=False, soft_wrap=True, width=width)
