"""``benchmarks/lstm_onnx.py --quick`` on a tiny ELMo backbone: both graphs hold what they say
(one layer each way: two fused ``LSTM`` nodes; two ``Loop`` nodes), each equals Keras within 1e-4 at every step of
rows of lengths 64, 40, 1 and 0 (all padding), and every shape is timed. No timing is asserted."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_lstm_onnx_quick(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("lstm_onnx_benchmark", ROOT / "benchmarks" / "lstm_onnx.py")
    assert spec is not None and spec.loader is not None
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    out = tmp_path / "summary.json"
    assert benchmark.main(["--quick", "--json", str(out)]) == 0
    summary = json.loads(out.read_text())
    assert summary["graphs"]["fused"]["recurrence"] == {"kind": "fused", "LSTM": 2, "Loop": 0}
    assert summary["graphs"]["loop"]["recurrence"] == {"kind": "loop", "LSTM": 0, "Loop": 2}
    assert summary["parity"]["fused"] <= 1e-4 and summary["parity"]["loop"] <= 1e-4
    table = summary["latency"]["1"]
    assert set(table) == {"1 x 64", "32 x 64", "32 x 64 ragged"}
    assert all(row[name][key] > 0 for row in table.values() for name in ("fused", "loop") for key in ("median_ms", "cpu_median_ms"))
    assert 8 <= table["32 x 64 ragged"]["mean_length"] < 64 and table["32 x 64"]["mean_length"] == 64
