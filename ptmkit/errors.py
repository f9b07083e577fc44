"""User-facing errors.

Every error a user can cause (bad input file, bad config key, broken run directory) is a
:class:`PtmkitError`. The CLI prints its message as one line and exits non-zero; anything else is a
bug and gets a traceback under ``--debug``.
"""

from __future__ import annotations


class PtmkitError(Exception):
    """An error caused by input the user can fix; ``str(error)`` is a complete one-line message."""

    exit_code = 2


class ConfigError(PtmkitError):
    """An invalid, unknown or mistyped configuration key or value."""


class DataError(PtmkitError):
    """A corpus or labelled file that cannot be used (missing, empty, malformed line)."""


class RunDirError(PtmkitError):
    """A run or export directory that is missing a file, or holds a corrupted one."""


class PluginError(PtmkitError):
    """An unknown plugin or family name, or two distributions claiming one family."""


class ExportError(PtmkitError):
    """An export that cannot be made or failed a check (ONNX parity, a refused option); nothing was written."""


class OutputError(PtmkitError):
    """A destination the user named (``--out``, ``--output``, a repository directory) that cannot be
    written: a read-only or special file system, no permission, no space left. The message names
    the user's path, never a temporary file beside it."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) during training; ``str(error)`` says which step the saved checkpoint
    holds and the command that continues the run. The CLI prints it and exits 130."""
