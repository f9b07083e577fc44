"""Plugin discovery, registry and fault isolation.

Plugins are modules registered under the entry-point group ``ptmkit.plugins``; ptmkit's own
objectives, heads and readers (:mod:`ptmkit.builtins`) are registered first through the same
:class:`pluggy.PluginManager`, and ptmkit's model families (``ptmkit_bert`` ...) come in through
entry points exactly as a third-party ``ptmkit-foo`` package would.

Environment variables (the pytest / tox way out of a broken environment):

* ``PTMKIT_STRICT_PLUGINS=1``: a plugin that raises on import re-raises instead of being skipped.
* ``PTMKIT_DISABLE_PLUGIN_AUTOLOAD=1``: load no entry points (only the built-ins).
* ``PTMKIT_DISABLED_PLUGINS=a,b``: skip the entry points with these names.
* ``PTMKIT_PLUGINS=module_a,module_b``: also register these importable modules as plugins, after
  the entry points (pytest's ``PYTEST_PLUGINS``): a plugin under development, or one on
  ``PYTHONPATH`` whose distribution metadata is not installed. A module an entry point already
  registered is not registered twice.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.metadata
import logging
import os
import warnings
from collections.abc import Iterable
from typing import Any

import pluggy

from ptmkit import hookspecs
from ptmkit.contract import CorpusReader, Head, ModelFamily, Objective, capabilities
from ptmkit.errors import PluginError

ENTRY_POINT_GROUP = "ptmkit.plugins"
#: ptmkit's own plugin modules (objectives, heads, readers), registered before any entry point.
BUILTIN_PLUGINS = ("ptmkit.builtins",)
logger = logging.getLogger(__name__)


@dataclasses.dataclass
class PluginInfo:
    """What ``ptmkit plugins`` shows of one plugin."""

    name: str
    distribution: str
    version: str
    module: str
    families: list[str] = dataclasses.field(default_factory=list)
    objectives: list[str] = dataclasses.field(default_factory=list)
    heads: list[str] = dataclasses.field(default_factory=list)
    readers: list[str] = dataclasses.field(default_factory=list)
    hooks: list[str] = dataclasses.field(default_factory=list)
    error: str | None = None
    #: Names this plugin provides that another distribution provides too (``"family 'word2vec'"``):
    #: unusable until one is uninstalled or disabled; the plugin's other names work.
    conflicts: list[str] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None


class Registry:
    """Every installed plugin and what it provides, keyed by name.

    Built by :func:`get_registry`; tests build their own with :meth:`load`.
    """

    def __init__(self) -> None:
        self.manager = pluggy.PluginManager("ptmkit")
        self.manager.add_hookspecs(hookspecs)
        self.plugins: list[PluginInfo] = []
        self.families: dict[str, ModelFamily] = {}
        self.objectives: dict[str, Objective] = {}
        self.heads: dict[str, Head] = {}
        self.readers: dict[str, CorpusReader] = {}
        self._owner: dict[tuple[str, str], PluginInfo] = {}
        #: ``(kind, name)`` provided by two distributions -> the error that using it raises.
        self.conflicts: dict[tuple[str, str], str] = {}

    # -- loading -----------------------------------------------------------------------------

    @classmethod
    def load(cls, entry_points: Iterable[importlib.metadata.EntryPoint] | None = None) -> Registry:
        """Register the built-ins, then every entry point of group ``ptmkit.plugins``.

        Two distributions that provide the same family, objective, head or reader name make that
        name unusable (:attr:`conflicts`; looking it up raises :class:`PluginError` naming both),
        not the registry: every other name works, and ``ptmkit plugins`` lists the clash.
        ``PTMKIT_STRICT_PLUGINS=1`` raises the conflict at load time instead.
        """
        registry = cls()
        for module_name in BUILTIN_PLUGINS:
            # By name, as pytest loads its default_plugins: the built-ins are a plugin above the
            # registry (they import the readers, which ask the registry), not a part of it.
            builtins = importlib.import_module(module_name)
            registry.register(builtins, PluginInfo("ptmkit", "ptmkit", _version("ptmkit"), module_name))
        if entry_points is None:
            if os.environ.get("PTMKIT_DISABLE_PLUGIN_AUTOLOAD") == "1":
                entry_points = []
            else:
                entry_points = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
        disabled = {n.strip() for n in os.environ.get("PTMKIT_DISABLED_PLUGINS", "").split(",") if n.strip()}
        seen: set[tuple[str, str, str]] = set()
        # ptmkit's own plugins first, whatever the order of sys.path (a PYTHONPATH entry comes
        # before site-packages): a third-party distribution that reuses a built-in name is then
        # always the one named second in the conflict.
        entry_points = sorted(entry_points, key=lambda ep: ep.dist is None or _normalise(ep.dist.name) != "ptmkit")
        for ep in entry_points:
            dist = ep.dist.name if ep.dist is not None else "?"
            key = (_normalise(dist), ep.name, ep.value)
            # The same distribution can be on sys.path twice (a lib64 -> lib symlink): once only.
            if key in seen or ep.name in disabled:
                continue
            seen.add(key)
            registry._load_entry_point(ep)
        for module_name in (n.strip() for n in os.environ.get("PTMKIT_PLUGINS", "").split(",")):
            if module_name and module_name not in disabled:
                registry._load_module(module_name)
        return registry

    def _load_module(self, module_name: str) -> None:
        """Register an importable module named in ``PTMKIT_PLUGINS`` (fault-isolated like an entry point)."""
        info = PluginInfo(module_name, "PTMKIT_PLUGINS", "0+local", module_name)
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:
            if os.environ.get("PTMKIT_STRICT_PLUGINS") == "1":
                raise
            info.error = f"{type(exc).__name__}: {exc}"
            warnings.warn(f"ptmkit: skipped plugin {module_name!r} from PTMKIT_PLUGINS: {info.error}", RuntimeWarning, stacklevel=2)
            self.plugins.append(info)
            return
        if self.manager.is_registered(module):
            return
        self.register(module, info)

    def _load_entry_point(self, ep: importlib.metadata.EntryPoint) -> None:
        dist = ep.dist.name if ep.dist is not None else "?"
        version = ep.dist.version if ep.dist is not None else "?"
        info = PluginInfo(ep.name, dist, version, ep.value)
        try:
            module = ep.load()
        except Exception as exc:
            if os.environ.get("PTMKIT_STRICT_PLUGINS") == "1":
                raise
            info.error = f"{type(exc).__name__}: {exc}"
            warnings.warn(
                f"ptmkit: skipped plugin {ep.name!r} from {dist} {version}: {info.error} "
                "(PTMKIT_STRICT_PLUGINS=1 re-raises)",
                RuntimeWarning,
                stacklevel=2,
            )
            self.plugins.append(info)
            return
        self.register(module, info)

    def register(self, module: Any, info: PluginInfo) -> None:
        """Register one plugin module and collect what its hooks provide.

        A name another distribution already provides becomes a conflict (see :meth:`load`).
        """
        if self.manager.is_registered(module):
            return
        self.manager.register(module, name=info.name)
        info.hooks = sorted(caller.name for caller in self.manager.get_hookcallers(module) or [])
        hook = self.manager.hook
        for kind, table, collected in (
            ("family", self.families, _call_one(hook.ptmkit_model_families, module)),
            ("objective", self.objectives, _call_one(hook.ptmkit_objectives, module)),
            ("head", self.heads, _call_one(hook.ptmkit_heads, module)),
            ("reader", self.readers, _call_one(hook.ptmkit_corpus_readers, module)),
        ):
            for item in collected:
                self._claim(kind, table, item, info)
        self.plugins.append(info)

    def _claim(self, kind: str, table: dict[str, Any], item: Any, info: PluginInfo) -> None:
        owner = self._owner.get((kind, item.name))
        if owner is not None and owner.distribution != info.distribution:
            message = (
                f"{kind} {item.name!r} is provided by two distributions: {owner.distribution} "
                f"{owner.version} (plugin {owner.name!r}) and {info.distribution} {info.version} "
                f"(plugin {info.name!r}); uninstall one, or disable one with PTMKIT_DISABLED_PLUGINS"
            )
            if os.environ.get("PTMKIT_STRICT_PLUGINS") == "1":
                raise PluginError(message)
            warnings.warn(f"ptmkit: {message}", RuntimeWarning, stacklevel=2)
            self.conflicts[(kind, item.name)] = message
            table.pop(item.name, None)
            lists = {"family": owner.families, "objective": owner.objectives, "head": owner.heads, "reader": owner.readers}
            if item.name in lists[kind]:
                lists[kind].remove(item.name)
            for plugin in (owner, info):
                plugin.conflicts.append(f"{kind} {item.name!r}")
            return
        table[item.name] = item
        self._owner[(kind, item.name)] = info
        {"family": info.families, "objective": info.objectives, "head": info.heads, "reader": info.readers}[kind].append(item.name)

    # -- look-ups ----------------------------------------------------------------------------

    def family(self, name: str) -> ModelFamily:
        """Return the family called ``name``.

        Raises:
            PluginError: no installed plugin provides it; the message lists those that exist.
        """
        self._refuse_conflict("family", name)
        try:
            return self.families[name]
        except KeyError:
            broken = [p for p in self.plugins if not p.ok]
            hint = f"; {len(broken)} plugin(s) failed to load, see `ptmkit plugins`" if broken else ""
            raise PluginError(
                f"unknown model family {name!r}; installed: {', '.join(sorted(self.families)) or 'none'}{hint}"
            ) from None

    def objective(self, name: str) -> Objective:
        """Return the objective called ``name``, or raise :class:`PluginError` listing the others."""
        self._refuse_conflict("objective", name)
        try:
            return self.objectives[name]
        except KeyError:
            raise PluginError(f"unknown objective {name!r}; installed: {', '.join(sorted(self.objectives))}") from None

    def head(self, name: str) -> Head:
        """Return the head called ``name``, or raise :class:`PluginError` listing the others."""
        self._refuse_conflict("head", name)
        try:
            return self.heads[name]
        except KeyError:
            raise PluginError(f"unknown head {name!r}; installed: {', '.join(sorted(self.heads))}") from None

    def _refuse_conflict(self, kind: str, name: str) -> None:
        """Raise :class:`PluginError` (naming both distributions) for a name two of them provide."""
        if (kind, name) in self.conflicts:
            raise PluginError(self.conflicts[(kind, name)])

    def owner(self, kind: str, name: str) -> PluginInfo:
        """The plugin that provides ``name`` of ``kind`` (family, objective, head or reader)."""
        return self._owner[(kind, name)]

    def objectives_for(self, family: ModelFamily) -> list[str]:
        """Names of the objectives whose requirements ``family`` offers (:func:`ptmkit.contract.capabilities`)."""
        return sorted(n for n, o in self.objectives.items() if o.requires <= capabilities(family))

    def heads_for(self, family: ModelFamily) -> list[str]:
        """Names of the heads whose requirements ``family`` offers (:func:`ptmkit.contract.capabilities`)."""
        return sorted(n for n, h in self.heads.items() if h.requires <= capabilities(family))

    def add_commands(self, cli: Any) -> None:
        """Let every plugin add CLI commands (:func:`~ptmkit.hookspecs.ptmkit_register_commands`)."""
        self.manager.hook.ptmkit_register_commands(cli=cli)


def _call_one(hook_caller: Any, module: Any) -> list[Any]:
    """Call one hook of one plugin only, flattening its list."""
    impls = [impl for impl in hook_caller.get_hookimpls() if impl.plugin is module]
    return [item for impl in impls for item in (impl.function() or [])]


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


def _normalise(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


@functools.cache
def get_registry() -> Registry:
    """The process-wide registry, loaded on first use."""
    return Registry.load()
