"""``benchmarks/pretrain_throughput.py --family gpt --quick`` end to end (a tiny GPT on the corpus's
first 400 lines, 1 warm-up + 2 timed steps): every row runs and reports real values, and the
anchor (keras-hub ``GPT2CausalLM`` holding ptmkit's initial weights) computes ptmkit's ``clm`` loss on
the same batch. No timings are asserted."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from inplugins import in_tree_plugins  # noqa: F401 - the fixture

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.usefixtures("in_tree_plugins")


@pytest.mark.slow  # 45 s (load 3) to 100 s (load 6) of one child process on two shared cores: TensorFlow, seven traced fits
def test_pretrain_throughput_gpt_quick(tmp_path: Path) -> None:
    out = tmp_path / "gpt.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "plugins"), str(ROOT / "export"), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "pretrain_throughput.py"), "--family", "gpt", "--quick", "--json", str(out)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(out.read_text())
    setup = summary["setup"]
    assert setup["objective"] == "clm" and setup["quick"] and setup["model"]["vocabulary_size"] == 400
    # causal LM: the head runs on all 32 positions, 31 of a full window have a next token
    assert setup["prediction_slots"] == setup["sequence_length"] == 32
    assert 0 < setup["mean_masked"] <= 31
    assert summary["flops_per_token"]["lm_head"] == 6 * 32 * 400  # tied output projection, no dense transform
    rows = {row["name"]: row for row in summary["results"]}
    assert list(rows) == [
        "keras-hub GPT2CausalLM, arrays",
        "keras-hub GPT2CausalLM + ptmkit AdamW",
        "ptmkit model, arrays",
        "ptmkit model, PyDataset (pre-made)",
        "ptmkit model, PyDataset (live pipeline)",
        "ptmkit pretrain() end to end",
    ]  # --quick drops the XLA row
    for row in rows.values():
        assert row["tokens_per_second"] > 0 and row["median_step_cpu_ms"] > 0 and len(row["step_ms_per_round"][0]) == 3
    assert rows["keras-hub GPT2CausalLM, arrays"]["ratio_vs_anchor"] == 1.0
    assert summary["pretrain_runs"][0]["metrics"]["tokens_per_second"] > 0
    # the same layers and weight names: ptmkit's initial weights go into the anchor, so both compute one loss,
    # and a fresh model's next-token loss is that of a uniform guess over the 400 tokens
    loss = summary["first_batch_loss"]
    assert loss["weights_copied"]
    assert loss["log_vocabulary"] == pytest.approx(math.log(400))
    assert loss["anchor"] == pytest.approx(loss["ptmkit"], abs=1e-4)
    assert loss["ptmkit"] == pytest.approx(math.log(400), abs=0.05)
