"""``benchmarks/serve_benchmark.py --quick`` end to end (issue 21): a tiny random BERT with MiniLM's
tokenizer is imported and exported, then served over loopback HTTP; the batch-1 paths answer (the
script checks on the first request that /v1/predict and /v2's binary infer give the bare call's
embeddings), every throughput request is answered, a server run with ``--max-batch 1`` never forms
a larger batch, and the figures are consistent with each other. No latency or speed-up is
asserted: timed assertions do not belong in tests."""

from __future__ import annotations

import json
import re
from pathlib import Path

from benchmark_quick import run_quick


def test_serve_benchmark_quick(tmp_path: Path) -> None:
    out = tmp_path / "serve.json"
    printed = run_quick("serve_benchmark.py", "--work", str(tmp_path / "work"), "--json", str(out))
    assert re.search(
        r"^model: \S+; 200 glosses, median \d+ words; 1 ONNX Runtime thread\(s\)", printed, re.MULTILINE
    ), printed
    for workload in ("glosses", "128 tokens"):
        found = re.search(
            rf"^batch 1, {workload}: median bare ([\d.]+) ms, /v1/predict ([\d.]+) ms .*/v2 infer binary ([\d.]+) ms",
            printed,
            re.MULTILINE,
        )
        assert found and all(float(ms) > 0 for ms in found.groups()), printed
    results = json.loads(out.read_text())
    assert Path(results["export"]) == tmp_path / "work" / "minilm" / "export"
    for workload, run in results["latency"].items():
        assert run["requests"] == 12, workload
        assert all(ms > 0 for ms in run["median_ms"].values()) and all(ms > 0 for ms in run["server_side"].values())
        assert abs(run["added_v1"] - (run["median_ms"]["v1_predict"] / run["median_ms"]["bare"] - 1)) < 1e-9
    assert list(results["throughput"]) == ["glosses", "3-word queries"]
    for workload, runs in results["throughput"].items():
        off, on = runs["off"], runs["on"]
        for run, max_batch in ((off, 1), (on, 32)):
            assert (run["max_batch"], run["clients"], run["answered"], run["errors"]) == (max_batch, 4, 40, 0), (
                workload,
                run,
            )
            assert (
                f"max batch {max_batch}," in run["server"]
                and run["requests_per_s"] > 0
                and run["p95_latency_ms"] >= run["median_latency_ms"] > 0
            )
        assert off["mean_batch"] == 1.0 and 1.0 <= on["mean_batch"] <= 4  # never more rows a call than clients
        assert runs["speedup"] == on["requests_per_s"] / off["requests_per_s"]
        assert runs["ceiling"]["batch"] == max(1, round(on["mean_batch"])) and runs["ceiling"]["single_ms_per_text"] > 0
