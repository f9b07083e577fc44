"""``benchmarks/translation_speed.py --quick`` end to end (issue 21): a tiny Transformer trained for a
few steps on the first training pairs, exported with int8 (gated on 20 dev pairs), and the Keras
translator and both ONNX variants translating the same test sentences, greedy and with 4 beams;
the export's outputs match Keras' (the same search over the same weights). BLEU of a 12-step model
and the speeds measure nothing; no timing is asserted."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from benchmark_quick import run_quick


def test_translation_speed_quick(tmp_path: Path) -> None:
    printed = run_quick("translation_speed.py", "--work", str(tmp_path))
    assert re.search(
        r"\(tiny model: a smoke test\)\. 4 sentences of `en-de-test\.tsv`, 1 thread\(s\), median of 1 rounds", printed
    ), printed
    number = r"([\d.]+)"
    pattern = rf"^\| (greedy|beam 4) \| {number} \| {number} \| {number} \| {number}x \| {number}x \| (\d+)/4, (\d+)/4 \| {number} / {number} / {number} \|$"
    rows = re.findall(pattern, printed, re.MULTILINE)
    assert [row[0] for row in rows] == ["greedy", "beam 4"], printed
    for _, keras, fp32, int8, fp32_ratio, int8_ratio, same_fp32, same_int8, *bleu in rows:
        assert min(float(keras), float(fp32), float(int8)) > 0
        for ratio, speed in ((fp32_ratio, fp32), (int8_ratio, int8)):  # the ratio of the speeds, printed to 0.1 sent/s
            tolerance = 0.05 / float(keras) + 0.05 / float(speed) + 0.005
            assert math.isclose(float(ratio), float(speed) / float(keras), rel_tol=tolerance, abs_tol=0.01), (
                ratio,
                speed,
                keras,
            )
        assert (
            int(same_fp32) >= 3 and 0 <= int(same_int8) <= 4
        )  # fp32 ONNX computes Keras' logits to ~1e-6: one near-tie at most
        assert all(0.0 <= float(score) <= 100.0 for score in bleu)
    manifest = json.loads((tmp_path / "export" / "manifest.json").read_text())
    assert manifest["gate"]["int8"]["dev_sentences"] == 20 and {"fp32", "int8"} <= set(manifest["variants"])
    assert (
        len((tmp_path / "train-300.tsv").read_text(encoding="utf-8").splitlines()) == 301
    )  # a header and the first 300 pairs
    assert re.search(r"^  train_pairs: 300$", (tmp_path / "train.log").read_text(), re.MULTILINE)
