"""Errors raised by the lean runtime.

Every error a user can fix (a missing or broken export directory) is an :class:`ExportDirError`;
``str(error)`` is a complete one-line message that names the offending file.
"""

from __future__ import annotations


class ExportDirError(Exception):
    """An export directory that is missing, lacks a file, or holds a corrupted ``manifest.json``."""
