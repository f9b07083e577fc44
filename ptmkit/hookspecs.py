"""The plugin contract: pluggy hook specifications of the ``ptmkit`` project.

A plugin is a module (registered under the entry-point group ``ptmkit.plugins``) that implements
some of these hooks with :data:`ptmkit.hookimpl`. Each hook returns what the plugin *adds*; the
host collects the answers of every plugin. ptmkit's own objectives, heads and corpus readers are
registered through the same hooks by :mod:`ptmkit.builtins`, which is loaded exactly like a
third-party plugin (pytest's ``default_plugins``).

Model families, objectives, heads and readers are described in :mod:`ptmkit.contract`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from ptmkit.contract import CorpusReader, Head, ModelFamily, Objective

hookspec = pluggy.HookspecMarker("ptmkit")


@hookspec
def ptmkit_model_families() -> list[ModelFamily]:
    """Return the model families this plugin provides (the central hook).

    Returns:
        list of :class:`ptmkit.contract.ModelFamily`. Each family's ``name`` (e.g. ``"bert"``) is
        what users type in ``ptmkit train NAME``; two distributions returning the same name is a
        :class:`ptmkit.errors.PluginError` naming both. A family either plugs into the generic
        pre-training loop (tokenizer, backbone, objectives) or brings its own
        (:class:`ptmkit.contract.TrainsItself`, e.g. static word vectors);
        families providing ``WORD_VECTORS`` are served by ``ptmkit evaluate``, ``embed --words``
        and ``export --vectors``.
    """


@hookspec
def ptmkit_objectives() -> list[Objective]:
    """Return pre-training objectives this plugin adds (masked LM, next-sentence prediction, ...).

    An objective names the backbone outputs it needs (``Objective.requires``); it serves every
    family whose backbone provides them. Returns a list of :class:`ptmkit.contract.Objective`.
    """


@hookspec
def ptmkit_heads() -> list[Head]:
    """Return fine-tune heads this plugin adds (sequence classification, ...).

    Returns a list of :class:`ptmkit.contract.Head`; like objectives, a head declares the backbone
    outputs it needs.
    """


@hookspec
def ptmkit_corpus_readers() -> list[CorpusReader]:
    """Return readers for corpus or labelled-data formats, chosen by file suffix.

    Returns a list of :class:`ptmkit.contract.CorpusReader`. Compression suffixes (``.gz``,
    ``.bz2``) are handled by the host before the reader sees the stream; a later plugin's reader
    for a suffix takes precedence over the built-in one.
    """


@hookspec
def ptmkit_register_commands(cli: Any) -> None:
    """Add commands to the ``ptmkit`` command line (datasette's ``register_commands``).

    Args:
        cli: the :class:`typer.Typer` application; decorate functions with ``@cli.command()``.
    """
