"""Same command, same run: two `ptmkit train bert` processes with one seed write the same files.

Hugging Face's WordPiece trainer numbers its ``##`` continuation characters in hash-map order, a
new order in every process (huggingface/tokenizers#1794); before ptmkit fixed that order, three
identical commands gave three ``tokenizer.json`` files and moved hundreds of ids.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from test_resume import weights
from tinyconfig import TINY


def _train(corpus: Path, out: Path, **env: str) -> tuple[subprocess.Popen[bytes], Path]:
    """Start ``ptmkit train bert`` on ``corpus`` into ``out``, its standard error going to a file
    beside ``out`` (not a pipe, which could fill while the other process is waited for)."""
    args = [sys.executable, "-m", "ptmkit.cli", "train", "bert", "--corpus", str(corpus), "--out", str(out)]
    for item in TINY:
        args += ["--set", item]
    log = out.with_name(f"{out.name}.stderr")
    with open(log, "wb") as stderr:
        return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=stderr, env={**os.environ, **env}), log


def test_two_processes_give_identical_tokenizer_and_weights(tiny_corpus: Path, tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    # Side by side (most of each run is single-threaded: imports, tracing), as two users would.
    running = [_train(tiny_corpus, first), _train(tiny_corpus, second, RAYON_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")]  # another threading
    try:
        for process, log in running:
            assert process.wait(timeout=300) == 0, log.read_text(errors="replace")
    finally:
        for process, _ in running:
            process.kill()  # a no-op once it has ended

    assert (first / "tokenizer.json").read_bytes() == (second / "tokenizer.json").read_bytes()
    expected, actual = weights(first / "backbone.weights.h5"), weights(second / "backbone.weights.h5")
    assert expected.keys() == actual.keys() and len(expected) > 10
    for name in expected:
        assert np.array_equal(expected[name], actual[name]), f"{name} differs between two runs with one seed"
    timing = ("train_seconds_this_session", "tokens_per_second")
    metrics = [{k: v for k, v in json.loads((run / "metrics.json").read_text()).items() if k not in timing} for run in (first, second)]
    assert metrics[0] == metrics[1] and "heldout_mlm_accuracy" in metrics[0]


def test_wordpiece_vocabulary_is_the_same_in_every_process(tiny_corpus: Path) -> None:
    """Three trainer processes on the shipped corpus: one vocabulary (with the hash-order fault,
    three runs on these 400 paragraphs at 600 tokens gave two or three different files)."""
    script = (
        "import sys; from ptmkit_bert.tokenizer import train_wordpiece;"
        "lines = open(sys.argv[1], encoding='utf-8').read().splitlines();"
        "sys.stdout.write(train_wordpiece(lines, 600, True).to_str())"
    )
    outputs = {subprocess.run([sys.executable, "-c", script, str(tiny_corpus)], capture_output=True, text=True, check=True).stdout for _ in range(3)}
    assert len(outputs) == 1
