"""`ptmkit predict` as users run it: long texts, what each JSON line echoes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "export"))
from export_fixtures import LABELS, TinyExport  # noqa: E402

from ptmkit.cli import ECHO_CHARS, main  # noqa: E402


@pytest.fixture(scope="module")
def export(tiny_export: TinyExport) -> TinyExport:
    """The session's tiny export (conftest.py), which these tests only read."""
    return tiny_export


def predict(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, object]]:
    assert main(["predict", *args]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_a_long_line_echoes_its_start_and_index_and_is_classified_as_its_prefix(export: TinyExport, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ptmkit_export import Predictor

    long = "a gorgeous , witty , seductive movie . " * 50_000  # 2 MB on one line
    file = tmp_path / "texts.txt"
    file.write_text(f"ok\n{long}\n", encoding="utf-8")
    rows = predict(capsys, str(export.directory), "--file", str(file), "--variant", "fp32")
    assert [row["index"] for row in rows] == [0, 1]
    assert rows[0]["text"] == "ok"
    assert rows[1]["text"] == long[:ECHO_CHARS] + "\u2026"
    expected = Predictor(export.directory, variant="fp32").predict(["ok", long])
    assert [row["label"] for row in rows] == [p.label for p in expected]
    assert [row["probabilities"] for row in rows] == [{k: float(f"{v:.6g}") for k, v in p.probabilities.items()} for p in expected]
    assert list(rows[1]["probabilities"]) == LABELS  # type: ignore[call-overload]


def test_echo_prints_the_whole_text(export: TinyExport, capsys: pytest.CaptureFixture[str]) -> None:
    text = "the film is long " * 30
    (row,) = predict(capsys, str(export.directory), "--text", text, "--echo")
    assert row["text"] == text and row["index"] == 0


def test_top_k_prints_the_most_probable_labels_first_to_6_significant_digits(export: TinyExport, capsys: pytest.CaptureFixture[str]) -> None:
    from ptmkit_export import Predictor

    texts = ["a gorgeous , witty , seductive movie .", "simplistic , silly and tedious ."]
    expected = Predictor(export.directory, variant="fp32").predict(texts)
    rows = predict(capsys, str(export.directory), "--variant", "fp32", "--top-k", "2", "--text", texts[0], "--text", texts[1])
    for row, prediction in zip(rows, expected, strict=True):
        ranked = sorted(prediction.probabilities.items(), key=lambda item: -item[1])[:2]
        assert list(row["probabilities"].items()) == [(label, float(f"{p:.6g}")) for label, p in ranked]  # type: ignore[attr-defined]
        assert row["label"] == ranked[0][0] == prediction.label
        assert all(float(f"{p:.6g}") == p for p in row["probabilities"].values())  # type: ignore[attr-defined]
    (row,) = predict(capsys, str(export.directory), "--top-k", "10", "--text", texts[0])
    assert len(row["probabilities"]) == len(LABELS)  # type: ignore[arg-type]
    assert abs(sum(row["probabilities"].values()) - 1) < 1e-5  # type: ignore[attr-defined]


def test_top_k_below_1_is_a_usage_error(export: TinyExport) -> None:
    assert main(["predict", str(export.directory), "--top-k", "0", "--text", "ok"]) == 2


def test_file_dash_reads_standard_input(export: TinyExport, tmp_path: Path) -> None:
    """`--file -` as in `cat texts.txt | ptmkit predict EXPORT --file -`: the same lines as the
    file gives, plain or fastText-labelled, --text first."""
    import subprocess

    command = [sys.executable, "-m", "ptmkit.cli", "predict", str(export.directory), "--variant", "fp32"]
    plain = "ok\n\nsimplistic , silly and tedious .\n"
    labelled = "__label__neg simplistic , silly and tedious .\n__label__pos a gorgeous movie\n"
    for content in (plain, labelled):
        file = tmp_path / "texts.txt"
        file.write_text(content, encoding="utf-8")
        from_file = subprocess.run([*command, "--text", "first", "--file", str(file)], capture_output=True, text=True, timeout=300)
        from_stdin = subprocess.run([*command, "--text", "first", "--file", "-"], input=content, capture_output=True, text=True, timeout=300)
        assert from_file.returncode == from_stdin.returncode == 0, from_stdin.stderr
        assert from_stdin.stdout == from_file.stdout and len(from_stdin.stdout.splitlines()) == 3
    empty = subprocess.run([*command, "--file", "-"], input="", capture_output=True, text=True, timeout=300)
    assert empty.returncode == 2 and "nothing to predict" in empty.stderr
