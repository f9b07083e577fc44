"""StructBERT's structural objectives (Wang et al. 2020, section 2.2): the statistics of the
shuffled trigrams and of the three kinds of segment pairs over many draws, held to the paper's
recipe within ~4 standard errors (``within``), and a short training run of ``wso,sso``."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import numpy as np
import pytest
from test_objective_variants import SPECIALS, VOCAB, _range_corpus, batch_length, packed_words, within
from tinyconfig import TINY

from ptmkit.objectives.structbert import (
    SentenceStructuralObjective,
    WordStructuralConfig,
    WordStructuralObjective,
    non_identity_permutations,
)


def test_word_structural_objective_shuffles_five_percent_of_unmasked_trigrams_never_in_order() -> None:
    rng = np.random.default_rng(0)
    token_ids, padding_mask, _ = packed_words(rng, batch=800)
    distinct = np.arange(5, 5 + token_ids.shape[1])  # distinct ids: every reordering is visible
    token_ids = np.where((token_ids >= 5), distinct[None, :], token_ids).astype(np.int32)
    batch = {"token_ids": token_ids, "padding_mask": padding_mask}
    config = WordStructuralConfig()
    inputs, targets, weights = WordStructuralObjective().prepare(batch, np.random.default_rng(1), config, SPECIALS, VOCAB)
    shuffled, positions, ids, w = inputs["token_ids"], inputs["shuffle_positions"], targets["word_order"], weights["word_order"]
    assert positions.shape == (800, 3 * 7)  # 3 x ceil(0.05 x 128) slots
    orders: collections.Counter[tuple[int, ...]] = collections.Counter()
    chosen, possible = 0, 0
    for row in range(800):
        masked_here = set(inputs["mask_positions"][row][weights["wso"][row] > 0].tolist())
        count = int(w[row].sum())
        assert count % 3 == 0 and w[row, :count].all() and not w[row, count:].any()
        spans = positions[row, :count].reshape(-1, 3)
        assert (np.diff(spans, axis=1) == 1).all() and (np.diff(spans[:, 0]) >= 3).all()  # trigrams, apart
        for span in spans:
            assert not masked_here & set(span.tolist())  # never a token the masked LM predicts
            original = token_ids[row, span]
            assert (ids[row, positions[row] == span[0]] == original[0]).all()
            now = shuffled[row, span]
            assert sorted(now) == sorted(original) and (now != original).any()  # a permutation, not the identity
            orders[tuple(int(np.flatnonzero(original == t)[0]) for t in now)] += 1
        unmasked = padding_mask[row].astype(bool) & (token_ids[row] >= 5)
        unmasked[list(masked_here)] = False
        starts = int((unmasked[:-2] & unmasked[1:-1] & unmasked[2:]).sum())
        chosen += count // 3
        possible += starts
    assert within(chosen / possible, 0.05, possible, sigmas=6)  # rounding per row, so a looser bound
    assert set(orders) == {tuple(p) for p in non_identity_permutations(3).tolist()}
    total = sum(orders.values())
    assert all(within(n / total, 1 / 5, total) for n in orders.values())  # uniform over the 5 orders


def test_sentence_structural_pairs_are_next_previous_or_random_a_third_each(tmp_path: Path) -> None:
    from ptmkit.data.pretraining import InstanceSampler, load_token_file, sampler_options
    from ptmkit.objectives.structbert import SentenceStructuralConfig
    from ptmkit_bert import BertFamily

    rng = np.random.default_rng(0)
    tokens = load_token_file(_range_corpus(tmp_path, [int(n) for n in rng.integers(3, 90, size=200)]), "train")
    objective, config = SentenceStructuralObjective(), SentenceStructuralConfig()
    options = sampler_options({"sso": (objective, config)}, None)
    sampler = InstanceSampler(tokens, BertFamily(), SPECIALS, 32, **options)
    batch = sampler.batch(np.random.default_rng(1), 3000)
    sampler.close()
    _, targets, _ = objective.prepare(batch, rng, config, SPECIALS, VOCAB)
    labels = targets["sso"]
    for label in (0, 1, 2):
        assert within(float((labels == label).mean()), 1 / 3, 3000), label
    for ids, label in zip(batch["token_ids"], labels, strict=True):
        ids = ids[batch_length(ids)]
        seps = np.flatnonzero(ids == SPECIALS.sep)
        first, second = ids[1 : seps[0]].tolist(), ids[seps[0] + 1 : seps[1]].tolist()
        consecutive = (second + first) if label == 1 else (first + second)
        in_order = consecutive == list(range(consecutive[0], consecutive[0] + len(consecutive)))
        assert in_order == (label != 2), label  # a random second segment does not continue the first


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("wso.shuffle_rate", "0", "config key 'objectives.wso.shuffle_rate' must be in (0, 1], got 0.0"),
        ("wso.ngram", "7", "config key 'objectives.wso.ngram' must be in [2, 5], got 7"),
        ("sso.swap_rate", "0.7", "config keys 'objectives.sso.random_next_rate' + 'swap_rate' must be < 1 (the rest are pairs in order)"),
    ],
)
def test_bad_structural_settings_are_refused_in_one_line(tiny_corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, value: str, message: str) -> None:
    from ptmkit.cli import main

    out = tmp_path / "run"
    assert main(["train", "bert", "--corpus", str(tiny_corpus), "--out", str(out), "--objective", "wso,sso", "--set", f"objectives.{key}={value}"]) == 2
    assert capsys.readouterr().err.strip() == f"error: --set: {message}"
    assert not out.exists()


def test_structbert_pretrains_with_both_objectives_and_lowers_their_losses(tiny_corpus: Path, tmp_path: Path) -> None:
    """Untrained, the token heads predict about uniformly over 600 tokens (ln 600 = 6.40) and the
    3-way pair classifier is at ln 3 = 1.10; 40 steps bring both token losses below 6.15."""
    import math

    from ptmkit.training.pretrain import pretrain

    out = tmp_path / "run"
    metrics = pretrain("bert", tiny_corpus, out, overrides=[*TINY, "train.max_steps=40", "train.checkpoint_every=40", "train.learning_rate=3e-3"], objectives=["wso", "sso"])
    assert json.loads((out / "manifest.json").read_text())["objectives"] == ["wso", "sso"]
    for name in ("wso", "word_order"):
        assert 3.0 < metrics[f"heldout_{name}_loss"] < math.log(600) - 0.25, (name, metrics)
    assert metrics["heldout_wso_perplexity"] == pytest.approx(math.exp(metrics["heldout_wso_loss"]), rel=1e-2)
    assert 0.7 < metrics["heldout_sso_loss"] < 1.3 and 0.0 <= metrics["heldout_sso_accuracy"] <= 1.0
