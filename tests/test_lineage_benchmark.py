"""``benchmarks/lineage.py --quick``: the table's code on its cheapest rows (TF-IDF, word2vec), so
that the script cannot rot between runs; a second run reads the cached rows. No accuracy is asserted
beyond its range."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("sklearn")


def test_quick_rows_are_probed_cached_and_tabled(tmp_path: Path) -> None:
    out, work, kept = tmp_path / "lineage.md", tmp_path / "work", tmp_path / "kept"
    command = [
        sys.executable,
        str(ROOT / "benchmarks" / "lineage.py"),
        "--quick",
        "--only",
        "tfidf",
        "--only",
        "word2vec",
        "--work",
        str(work),
        "--rows",
        str(kept),  # rows kept apart from the runs (in git, for the full table)
        "--out",
        str(out),
    ]
    first = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    rows = {name: json.loads((kept / f"{name}.json").read_text()) for name in ("tfidf", "word2vec")}
    assert rows["word2vec"]["feature_kind"] == "averaged word vectors" and rows["word2vec"]["feature_dim"] == 32
    assert rows["word2vec"]["train"] == rows["tfidf"]["train"] == 2000
    for row in rows.values():
        assert 0 <= row["dev_accuracy"] <= 1 and 0 <= row["test_accuracy"] <= 1
    page = out.read_text(encoding="utf-8")
    assert "--quick" in page and "commit" in page and "load average" in page
    assert "| word2vec (" in page and "| tfidf (" in page and "| bert (" not in page and "| load |" in page
    assert not (work / "rows").exists()
    second = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0 and "tfidf: cached" in second.stdout and "word2vec: cached" in second.stdout
    assert out.read_text(encoding="utf-8").split("\n", 2)[2] == page.split("\n", 2)[2]  # the same rows
    every = [arg for arg in command if arg not in ("--only", "tfidf", "word2vec")] + ["--no-run"]  # every row, none run
    third = subprocess.run(every, capture_output=True, text=True, timeout=600)
    assert third.returncode == 0, third.stderr[-3000:]
    table = out.read_text(encoding="utf-8")
    assert "| bert (Devlin et al., BERT) | 2019 | not run yet |" in table and "| word2vec (" in table and "--no-run" not in table
    assert sorted(path.name for path in kept.iterdir()) == ["tfidf.json", "word2vec.json"]  # nothing added


def test_language_models_share_one_perplexity_table() -> None:
    """Rows whose runs score the held-out lines per word get a line each, with the ratio to their
    own unigram model; rows without (a probe-only row, an MLM) get none."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import lineage
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    rows = {
        "tfidf": {"dev_accuracy": 0.6},
        "nnlm": {"heldout": {"heldout_words": 11442, "heldout_unknown_targets": 2660, "heldout_word_perplexity": 150.0, "heldout_unigram_word_perplexity": 300.0}},
        "bert": {"heldout": {"heldout_mlm_perplexity": 917.9}},
        "gpt": {"heldout": {"heldout_words": 11442, "heldout_word_perplexity": 58335.5, "heldout_unigram_word_perplexity": 79865.1}},
    }
    table = lineage.lm_table(rows).splitlines()
    assert [line.split(" | ")[0] for line in table[2:]] == ["| nnlm", "| gpt"]  # the lineage's order
    assert table[2].endswith("| 11,442 | 2,660 | 150.0 | 300.0 | 0.500 |")
    assert table[3].endswith("| 11,442 | - | 58,335.5 | 79,865.1 | 0.730 |")
    assert lineage.lm_table({"bert": rows["bert"]}) == ""
