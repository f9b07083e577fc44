"""``benchmarks/lm_perplexity.py``: the longer budget is the quickstart run scaled by its own seconds,
and ``--quick`` (tiny GPT and NNLM, a few steps) runs end to end, caches its runs and tables them, so
that the script cannot rot between full runs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import lm_perplexity
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return lm_perplexity


def test_longer_budget_scales_the_quickstart_run(bench) -> None:
    assert bench.scaled_budget(200, 180.0, 30) == 2000  # 200 steps in 3 minutes: 30 minutes are 2,000
    assert bench.scaled_budget(3, 282.6, 30) == 19  # the NNLM's 3 epochs in 282.6 s: 19.1 epochs
    assert bench.scaled_budget(200, 180.0, 0.5) == 200  # never shorter than the quickstart run
    with pytest.raises(ValueError, match="0.0 s"):
        bench.scaled_budget(200, 0.0, 30)


def test_table_puts_each_unigram_model_under_its_run(bench) -> None:
    rows = [
        {"family": "nnlm", "budget": "quickstart", "budget_key": "model.epochs", "budget_value": 3, "train_seconds": 282.6,
         "heldout_words": 11442, "heldout_unknown_targets": 2660, "heldout_word_perplexity": 151.46,
         "heldout_unigram_word_perplexity": 278.754, "heldout_perplexity": 145.63},
        {"family": "gpt", "budget": "30 min", "budget_key": "train.max_steps", "budget_value": 2000, "train_seconds": 1790.0,
         "heldout_words": 11442, "heldout_word_perplexity": 30000.0, "heldout_unigram_word_perplexity": 79865.093,
         "heldout_token_perplexity": 400.0, "heldout_bits_per_byte": 2.0},
    ]
    lines = bench.table(rows).splitlines()[2:]
    assert lines[0] == "| quickstart | nnlm | `model.epochs=3` | 283 | 11,442 | 2,660 | 151.5 | 0.543 | 145.6 | - |"
    assert lines[1] == "| quickstart | unigram (nnlm's tokens) | - | - | 11,442 | - | 278.8 | 1.000 | - | - |"
    assert lines[2] == "| 30 min | gpt | `train.max_steps=2000` | 1,790 | 11,442 | - | 30,000.0 | 0.376 | 400.0 | 2.000 |"


def test_quick_run_end_to_end(tmp_path: Path) -> None:
    out, work = tmp_path / "lm.md", tmp_path / "work"
    command = [sys.executable, str(ROOT / "benchmarks" / "lm_perplexity.py"), "--quick", "--work", str(work), "--out", str(out)]
    first = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    page = out.read_text(encoding="utf-8")
    body = [line for line in page.splitlines() if line.startswith("| ") and not line.startswith("| budget")]
    assert [line.split(" | ")[:2] for line in body] == [
        ["| quickstart", "nnlm"], ["| quickstart", "unigram (nnlm's tokens)"], ["| quickstart", "gpt"], ["| quickstart", "unigram (gpt's tokens)"],
        ["| 0.1 min", "nnlm"], ["| 0.1 min", "unigram (nnlm's tokens)"], ["| 0.1 min", "gpt"], ["| 0.1 min", "unigram (gpt's tokens)"],
    ]
    assert "`train.max_steps=10`" in body[2] and "`model.epochs=1`" in body[0]  # the tiny configs' own lengths
    longer = {line.split(" | ")[1]: int(re.search(r"=(\d+)`", line).group(1)) for line in body[4:] if "unigram" not in line}
    assert longer["gpt"] >= 10 and longer["nnlm"] >= 1
    assert ", best " in body[4] and "on 20 validation lines" in body[4] and ", best " not in body[0]  # the NNLM's longer run stops early
    words = {line.split(" | ")[4] for line in body}
    assert len(words) == 1  # every run scored the same held-out words
    assert sorted(path.name for path in (work / "runs").iterdir()) == ["gpt-0.1min", "gpt-quickstart", "nnlm-0.1min", "nnlm-quickstart"]
    second = subprocess.run(command, capture_output=True, text=True, timeout=600)  # every run cached: nothing trained again
    assert second.returncode == 0, second.stderr[-3000:]
    assert out.read_text(encoding="utf-8").split("\n", 3)[3] == page.split("\n", 3)[3]  # the same table
    assert (work / "logs" / "gpt.log").read_text(encoding="utf-8").count("$ ptmkit train") == 2
