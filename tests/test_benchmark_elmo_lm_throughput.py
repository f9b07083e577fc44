"""``benchmarks/elmo_lm_throughput.py --quick`` end to end (issue 21): every row (ptmkit's ELMo
training step, full and sampled softmax; the Keras and torch models of the same shape) trains a
tiny biLM on the same batches, and the table's figures hang together: tokens/s is the batch's 64
tokens over the time per step, each anchor is 1.00x against itself. No speed is asserted: timed
assertions do not belong in tests."""

from __future__ import annotations

import math
import re

from benchmark_quick import run_quick

ROWS = {
    "ptmkit_full": "ptmkit elmo, full softmax",
    "ptmkit_sampled": "ptmkit elmo, sampled softmax",
    "keras_same": "keras, ELMo layers + Dense softmax + Adam",
    "keras_full": "keras plain, word embedding, full softmax (anchor)",
    "keras_sampled": "keras plain, word embedding, tf.nn.sampled_softmax_loss",
    "torch_full": "torch nn.LSTM, word embedding, full softmax (anchor)",
    "torch_sampled": "torch nn.LSTM, word embedding, sampled softmax",
}


def test_elmo_lm_throughput_quick() -> None:
    printed = run_quick("elmo_lm_throughput.py")
    rounds = re.findall(r"^round (\d+) (\w+): \d+ ms/step wall", printed, re.MULTILINE)
    assert rounds == [("1", key) for key in ROWS], printed  # one round, every row
    assert re.search(
        r"^\| row \| ms/step \(wall\) \| tokens/s \| CPU ms/step \| wall vs keras_full \| CPU vs keras_full \| wall vs torch_full \| CPU vs torch_full \|$",
        printed,
        re.MULTILINE,
    ), printed
    rows = {}
    for line in printed.splitlines():
        if line.startswith("| ") and not line.startswith("| row "):
            name, *values = (cell.strip() for cell in line.strip("|").split("|"))
            rows[name] = values
    assert list(rows) == list(ROWS.values()), printed
    for name, (wall, tokens, cpu, *ratios) in rows.items():
        ms, per_second = int(wall), int(tokens.replace(",", ""))
        assert ms > 0 and int(cpu) >= 0 and all(float(ratio.rstrip("x")) > 0 for ratio in ratios), name
        # batch 4 x 16 tokens a step; ms/step is printed to the millisecond
        assert math.isclose(per_second, 4 * 16 * 1000 / ms, rel_tol=0.5 / ms + 0.01), name
    assert rows[ROWS["keras_full"]][3:5] == ["1.00x", "1.00x"] and rows[ROWS["torch_full"]][5:7] == ["1.00x", "1.00x"]
