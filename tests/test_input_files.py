"""``--file`` inputs (prompts, sentences to translate): regular files, pipes such as the shell's
``<(command)``, standard input; each unreadable case one error naming the file."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from ptmkit.errors import DataError
from ptmkit.io import read_utf8_lines


def test_a_pipe_reads_like_a_file_and_dev_null_is_empty(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes("\ufeffone\n\n  \ntwo\n".encode()), daemon=True)
    writer.start()
    assert read_utf8_lines(fifo, keep_blank=True) == ["one", "", "", "two"]  # the BOM dropped, blank lines kept
    writer.join(timeout=10)
    with pytest.raises(DataError, match=r"^/dev/null: no text in it"):
        read_utf8_lines(Path("/dev/null"))


def test_unreadable_inputs_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"missing\.txt: no such file$"):
        read_utf8_lines(tmp_path / "missing.txt")
    with pytest.raises(DataError, match="is a directory, not a file$"):
        read_utf8_lines(tmp_path)
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine\nnot \xff fine\n")
    with pytest.raises(DataError, match=r"bad\.txt:2: not valid UTF-8 \(byte 5 of the line\)$"):
        read_utf8_lines(bad)
    assert read_utf8_lines(_written(tmp_path, "a\n\nb\n")) == ["a", "b"]  # blank lines dropped by default


def _written(directory: Path, text: str) -> Path:
    path = directory / "texts.txt"
    path.write_text(text, encoding="utf-8")
    return path
