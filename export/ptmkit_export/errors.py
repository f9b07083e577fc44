"""Errors raised by the lean runtime.

Every error a user can fix (a missing or broken export directory) is an :class:`ExportDirError`;
``str(error)`` is a complete one-line message that names the offending file.
"""

from __future__ import annotations


class ExportDirError(Exception):
    """An export directory that is missing, lacks a file, or holds a corrupted ``manifest.json``."""


class DestinationExistsError(ExportDirError):
    """A destination that exists and is replaced only when the caller says so; ``path`` names it, so
    that a front end can name its own switch (the Python API's ``overwrite=True``, ``--force``)."""

    def __init__(self, path: object, switch: str = "overwrite=True") -> None:
        super().__init__(f"{path}: already exists ({switch} replaces it)")
        self.path = path
