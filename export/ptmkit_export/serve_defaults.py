"""What the server (:mod:`ptmkit_export.server`) and its command line
(:mod:`ptmkit_export.serve_cli`) share. Standard library only: the command line imports it to say
what to install when the ``serve`` extra is missing."""

from __future__ import annotations

#: Request bodies larger than this (bytes) get HTTP 413; ``--max-body-bytes`` changes it.
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
#: Generations (decoder exports) a server runs at once; ``--generation-slots`` changes it.
DEFAULT_GENERATION_SLOTS = 2
SERVE_EXTRA = "pip install 'ptmkit-export[serve]' (from a ptmkit checkout: pip install -e './export[serve]')"


def missing_extra_message(error: ImportError) -> str:
    """One line naming the module that is missing and the install command that provides it."""
    module = (error.name or "").split(".")[0]
    return f"ptmkit serving needs the 'serve' extra{f' (missing module {module!r})' if module else ''}: {SERVE_EXTRA}"
