"""A destination that cannot be written is the user's to fix: exit 2, one line naming the user's
own path (never the temporary file or directory beside it), and nothing left behind."""

from __future__ import annotations

import errno
import subprocess
import sys
from pathlib import Path

import pytest

from ptmkit.errors import OutputError
from ptmkit.io import atomic_path, atomic_write_text, staging_directory

CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus" / "enwiki-106.txt"
CLI = [sys.executable, "-m", "ptmkit.cli"]


def test_a_file_under_a_file_names_the_users_path(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("x")
    target = tmp_path / "plain" / "out.txt"
    with pytest.raises(OutputError) as caught:
        atomic_write_text(target, "hello")
    message = str(caught.value)
    assert message == f"{target}: cannot write ({tmp_path / 'plain'} is a file, not a directory)"  # not mkdir's "File exists"
    with pytest.raises(OutputError, match="plain is a file, not a directory"):
        atomic_write_text(tmp_path / "plain" / "deeper" / "out.txt", "hello")


def test_a_writer_out_of_space_names_the_users_path_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "vectors.txt"
    with pytest.raises(OutputError, match=f"^{target}: cannot write \\(No space left on device\\)$"):
        with atomic_path(target) as tmp:
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp))
    assert list(tmp_path.iterdir()) == []


def test_an_input_error_inside_the_writer_is_not_told_as_an_output_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="missing-input"):
        with atomic_path(tmp_path / "out.txt"):
            open(tmp_path / "missing-input")  # noqa: SIM115 - the read that fails
    assert list(tmp_path.iterdir()) == []


def test_a_staging_directory_names_the_target_and_is_removed(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("x")
    with pytest.raises(OutputError, match=f"^{tmp_path / 'plain' / 'run'}: cannot write .{tmp_path / 'plain'} is a file"):
        with staging_directory(tmp_path / "plain" / "run", ".run-"):
            pass
    with staging_directory(tmp_path / "run", ".run-") as tmp_name:
        assert Path(tmp_name).parent == tmp_path
    assert not Path(tmp_name).exists()


@pytest.fixture(scope="module")
def word2vec_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("w2v")
    corpus = work / "corpus.txt"
    corpus.write_text("\n".join(CORPUS.read_text(encoding="utf-8").splitlines()[:40]) + "\n", encoding="utf-8")
    run = work / "run"
    settings = ["--set", "model.vector_size=8", "--set", "model.epochs=1"]
    result = subprocess.run([*CLI, "train", "word2vec", "--corpus", str(corpus), "--out", str(run), *settings], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return run


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc, a directory that takes no new file")
@pytest.mark.parametrize(
    ("args", "target"),
    [
        (["--vectors", "word2vec", "--output", "/proc/ptmkit-vectors.txt"], "/proc/ptmkit-vectors.txt"),
        (["--out", "/proc/ptmkit-export"], "/proc/ptmkit-export"),
        (["--vectors", "glove", "--output", "/proc/ptmkit-missing/vectors.txt"], "/proc/ptmkit-missing/vectors.txt"),
    ],
)
def test_export_to_an_unwritable_place_exits_2_naming_the_users_path(word2vec_run: Path, args: list[str], target: str) -> None:
    result = subprocess.run([*CLI, "export", str(word2vec_run), *args], capture_output=True, text=True, timeout=300)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith(f"error: {target}: cannot write ("), result.stderr
    assert ".tmp-" not in lines[0] and ".export-" not in lines[0]


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc, a directory that takes no new file")
def test_any_os_error_is_one_line_exit_2_naming_the_path(tmp_path: Path) -> None:
    """The CLI's last net: an OSError no command translated still names its file, exit 2."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("a b c\n" * 20)
    result = subprocess.run([*CLI, "train", "word2vec", "--corpus", str(corpus), "--out", "/proc/ptmkit-run"], capture_output=True, text=True, timeout=300)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: /proc/ptmkit-run: "), result.stderr
    assert "Traceback" not in result.stderr and "--debug" not in result.stderr
