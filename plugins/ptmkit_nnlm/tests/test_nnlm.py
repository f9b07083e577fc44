"""The NNLM family: Bengio et al. 2003's parameter count, n-gram contexts against a plain loop,
and held-out perplexity below the maximum-likelihood unigram model's on the same split."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from inplugins import in_tree_plugins  # noqa: F401 - the fixture
from tinyconfig import DATA

from ptmkit.testing import main

pytestmark = pytest.mark.usefixtures("in_tree_plugins")


@pytest.mark.parametrize(("hidden", "direct"), [(50, True), (50, False), (0, True)])
def test_parameter_count_is_the_papers(hidden: int, direct: bool) -> None:
    from ptmkit.api import quiet_tensorflow
    from ptmkit_nnlm.model import build_nnlm

    quiet_tensorflow()
    size, n, m = 500, 5, 30
    model = build_nnlm(size, n - 1, m, hidden, direct)
    # Bengio et al. 2003, section 2: |V|(1 + nm + h) + h(1 + (n-1)m), less W when there are no
    # direct connections, less U, d and H without a hidden layer.
    expected = size * (1 + n * m + hidden) + hidden * (1 + (n - 1) * m)
    if not direct:
        expected -= size * (n - 1) * m
    assert model.count_params() == expected


def test_contexts_are_the_previous_words_padded_with_start(tmp_path: Path) -> None:
    from ptmkit.api import EncodedCorpus
    from ptmkit_nnlm.train import ngrams

    lines = [[5, 6, 7], [8], [9, 10, 11, 12, 13]]
    ids = np.asarray([t for line in lines for t in line], np.int32)
    offsets = np.cumsum([0] + [len(line) for line in lines])
    tokens = EncodedCorpus(ids, offsets, len(ids))
    contexts, targets = ngrams(tokens, np.arange(len(ids)), 3, start_id=0)
    expected = []
    for line in lines:
        for t in range(len(line)):
            expected.append(([0] * 3 + line[:t])[-3:])
    assert contexts.tolist() == expected and targets.tolist() == ids.tolist()


def test_heldout_perplexity_beats_the_unigram_model(tmp_path: Path) -> None:
    lines = (DATA / "corpus" / "enwiki-106.txt").read_text(encoding="utf-8").lower().splitlines()[:700]
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "run"
    argv = ["train", "nnlm", "--corpus", str(corpus), "--out", str(out), "--set", "model.epochs=3", "--set", "model.learning_rate=0.003", "--set", "model.heldout_lines=100", "--set", "model.vector_size=30", "--set", "model.hidden=50"]
    assert main(argv) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    # The unigram model on the same vocabulary (<unk> for rarer words, </s> per line), fitted on
    # the training lines by counting, scored on the held-out lines.
    counts = Counter(w for line in lines[:-100] for w in line.split())  # the vocabulary of the training lines
    known = {w for w, c in counts.items() if c >= 5}

    def units(text: str) -> list[str]:
        return [w if w in known else "<unk>" for w in text.split()] + ["</s>"]

    train = Counter(u for line in lines[:-100] for u in units(line))
    total = sum(train.values())
    heldout = [u for line in lines[-100:] for u in units(line)]
    unigram = math.exp(-sum(math.log(train.get(u, 0.5) / total) for u in heldout) / len(heldout))
    assert metrics["heldout_targets"] == len(heldout)
    assert metrics["heldout_unknown_targets"] == heldout.count("<unk>") > 0
    assert metrics["heldout_perplexity"] < 0.9 * unigram
    # Per word (the GPT and ELMo families' figure): the line's words without its </s>, and the
    # add-one unigram model over the vocabulary (its words, </s>, <unk> and the never-seen <s>).
    words = [u for u in heldout if u != "</s>"]
    size = len(known) + 3
    add_one = math.exp(-sum(math.log((train.get(u, 0) + 1) / (total + size)) for u in words) / len(words))
    assert metrics["heldout_words"] == len(words) == sum(len(line.split()) for line in lines[-100:])
    assert metrics["heldout_unigram_word_perplexity"] == pytest.approx(add_one, abs=1e-3)
    assert metrics["heldout_word_perplexity"] < 0.9 * metrics["heldout_unigram_word_perplexity"]


def test_a_heldout_set_over_half_the_corpus_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """150 lines with the default 200 held out used to train on one line and report a perplexity."""
    corpus = tmp_path / "short.txt"
    corpus.write_text("\n".join((DATA / "corpus" / "enwiki-106.txt").read_text(encoding="utf-8").splitlines()[:150]) + "\n", encoding="utf-8")
    out = tmp_path / "run"
    assert main(["train", "nnlm", "--corpus", str(corpus), "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {corpus}: 150 lines, and model.heldout_lines = 200 would hold out more than half of them; "
        "lower it (e.g. --set model.heldout_lines=15) or give a longer corpus"
    )
    assert not out.exists()


def test_a_word_only_in_heldout_lines_is_not_in_the_vocabulary(tmp_path: Path) -> None:
    """The vocabulary is counted on the training lines: a word frequent only in the held-out lines
    is <unk> there, as it would be for unseen text."""
    lines = (DATA / "corpus" / "enwiki-106.txt").read_text(encoding="utf-8").lower().splitlines()[:60]
    lines[-5:] = [line + " zyzzyva zyzzyva" for line in lines[-5:]]
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(lines[:30]) + "\n\n" + "\n".join(lines[30:]) + "\n", encoding="utf-8")  # a blank line is not a line
    out = tmp_path / "run"
    argv = ["train", "nnlm", "--corpus", str(corpus), "--out", str(out), "--set", "model.epochs=1", "--set", "model.heldout_lines=10", "--set", "model.min_count=2"]
    assert main(argv) == 0
    words = [line.split("\t")[0] for line in (out / "vocabulary.tsv").read_text(encoding="utf-8").splitlines()]
    assert "zyzzyva" not in words and "the" in words
    metrics = json.loads((out / "metrics.json").read_text())
    training = Counter(w for line in lines[:50] for w in line.split())
    held = [w for line in lines[50:] for w in line.split()]
    assert metrics["heldout_unknown_targets"] == sum(1 for w in held if training[w] < 2)


def test_early_stopping_keeps_the_best_epochs_weights(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With ``patience``, training stops ``patience`` epochs after the best validation
    cross-entropy, and the run keeps that epoch's weights: its held-out perplexity and vectors are
    those of a run trained for exactly the best epoch's count; the validation lines (before the
    held-out ones) are out of the vocabulary count and the training targets."""
    lines = (DATA / "corpus" / "enwiki-106.txt").read_text(encoding="utf-8").lower().splitlines()[:200]
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    common = ["--corpus", str(corpus), "--set", "model.learning_rate=0.01", "--set", "model.heldout_lines=30", "--set", "model.validation_lines=30",
              "--set", "model.min_count=2", "--set", "model.vector_size=16", "--set", "model.hidden=16"]
    assert main(["train", "nnlm", *common, "--out", str(tmp_path / "early"), "--set", "model.epochs=15", "--set", "model.patience=2"]) == 0
    assert "stopping early" in capsys.readouterr().err  # the console writes to stderr
    early = json.loads((tmp_path / "early" / "metrics.json").read_text())
    assert early["epochs_trained"] == early["best_epoch"] + 2 < 15 and early["best_epoch"] >= 1
    assert early["validation_lines"] == 30 and early["validation_targets"] == sum(len(line.split()) + 1 for line in lines[140:170])
    assert early["training_targets"] == sum(len(line.split()) + 1 for line in lines[:140])
    best = early["best_epoch"]
    assert main(["train", "nnlm", *common, "--out", str(tmp_path / "fixed"), "--set", f"model.epochs={best}"]) == 0
    fixed = json.loads((tmp_path / "fixed" / "metrics.json").read_text())
    assert early["heldout_perplexity"] == fixed["heldout_perplexity"] and early["heldout_word_perplexity"] == fixed["heldout_word_perplexity"]
    np.testing.assert_array_equal(np.load(tmp_path / "early" / "vectors.npy"), np.load(tmp_path / "fixed" / "vectors.npy"))
    assert main(["train", "nnlm", *common, "--out", str(tmp_path / "bad"), "--set", "model.validation_lines=0", "--set", "model.patience=2"]) == 2
    assert "'model.patience' = 2 needs validation lines" in capsys.readouterr().err and not (tmp_path / "bad").exists()
