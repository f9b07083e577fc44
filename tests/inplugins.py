"""The in-tree plugin packages (plugins/ptmkit_*) and a fixture that makes the registry see them.

After ``pip install -e .`` each is registered through its entry point in pyproject.toml. An
editable install made before a plugin was added has stale metadata without that entry point; the
fixture then names the missing ones in ``PTMKIT_PLUGINS`` (the documented way to register an
importable plugin module), for the tests that need them and no others.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import tomllib
from collections.abc import Iterator

import pytest
from tinyconfig import REPO


def declared_entry_points() -> dict[str, str]:
    """``name -> module`` of the ``ptmkit.plugins`` entry points pyproject.toml declares."""
    with open(REPO / "pyproject.toml", "rb") as handle:
        return dict(tomllib.load(handle)["project"]["entry-points"]["ptmkit.plugins"])


@contextlib.contextmanager
def registered() -> Iterator[None]:
    """Within the block, the process registry (and subprocesses) see every in-tree plugin."""
    from ptmkit.plugins import get_registry

    installed = {ep.value for ep in importlib.metadata.entry_points(group="ptmkit.plugins")}
    missing = [module for module in declared_entry_points().values() if module not in installed]
    with pytest.MonkeyPatch.context() as patch:
        if missing:
            patch.setenv("PTMKIT_PLUGINS", ",".join(missing))
        get_registry.cache_clear()
        try:
            yield
        finally:
            get_registry.cache_clear()


@pytest.fixture
def in_tree_plugins() -> Iterator[None]:
    with registered():
        yield
