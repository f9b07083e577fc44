"""The biLM's sampled softmax (``objectives.bilm.softmax = "sampled"``): equal to
``tf.nn.sampled_softmax_loss`` on the same candidates, the sampler's distribution and expected
counts against TensorFlow's, the loss's expectation against the full softmax's, the vocabulary's
frequency order the sampler assumes, a training run that lowers the full-softmax held-out
perplexity, and bad values refused in one line."""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import pytest
from inplugins import in_tree_plugins  # noqa: F401 - the fixture

from ptmkit.testing import tiny_texts

pytestmark = pytest.mark.usefixtures("in_tree_plugins")


def _problem(vocabulary: int, rows: int, dim: int = 6, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    states = rng.normal(size=(rows, dim)).astype("float32")
    kernel = rng.normal(0, 0.7, size=(dim, vocabulary)).astype("float32")
    bias = rng.normal(size=vocabulary).astype("float32")
    targets = rng.integers(0, vocabulary, rows)
    return states, kernel, bias, targets


def test_equals_tensorflow_sampled_softmax_loss_on_the_same_candidates() -> None:
    """Given the candidates and expected counts of TensorFlow's unique log-uniform sampler (what
    bilm-tf draws), the loss equals ``tf.nn.sampled_softmax_loss``'s row by row; a candidate
    drawn twice counts once (the same set without the repeat gives the same loss)."""
    import tensorflow as tf

    from ptmkit_elmo.softmax import sampled_softmax_nll

    vocabulary, num_sampled = 50, 20
    states, kernel, bias, targets = _problem(vocabulary, 64)
    labels = targets.reshape(-1, 1).astype("int64")
    sampled, true_expected, sampled_expected = tf.random.log_uniform_candidate_sampler(labels, 1, num_sampled, True, vocabulary, seed=3)
    reference = tf.nn.sampled_softmax_loss(kernel.T, bias, labels, states, num_sampled, vocabulary, sampled_values=(sampled, true_expected, sampled_expected))
    ours = sampled_softmax_nll(states, targets, kernel, bias, sampled, true_expected[:, 0], sampled_expected)
    assert int(np.sum(np.isin(targets, sampled.numpy()))) > 0  # accidental hits occur and are removed
    np.testing.assert_allclose(np.asarray(ours), reference.numpy(), rtol=1e-5, atol=1e-5)
    twice = np.concatenate([sampled.numpy(), sampled.numpy()[:3]])
    again = sampled_softmax_nll(states, targets, kernel, bias, twice, true_expected[:, 0], np.concatenate([sampled_expected, sampled_expected[:3]]))
    np.testing.assert_allclose(np.asarray(again), reference.numpy(), rtol=1e-5, atol=1e-5)


def test_sampler_distribution_and_expected_counts_match_tensorflow() -> None:
    """The draws follow Q(k) = log((k + 2) / (k + 1)) / log(V + 1) (TensorFlow's expected count
    of one draw, ``unique=False``); the inclusion probability 1 - (1 - Q)^S is TensorFlow's
    ``unique=True`` expected count when S draws were needed (checked on ``num_tries``)."""
    import tensorflow as tf

    from ptmkit_elmo.softmax import inclusion_probability, log_uniform_candidates, log_uniform_probability

    vocabulary = 40
    ids = np.arange(vocabulary)
    _, one_draw, _ = tf.random.log_uniform_candidate_sampler(ids.reshape(-1, 1).astype("int64"), 1, 1, False, vocabulary, seed=1)
    q = np.asarray(log_uniform_probability(ids, vocabulary))
    np.testing.assert_allclose(q, one_draw.numpy()[:, 0], rtol=1e-5)
    assert q.sum() == pytest.approx(1.0, abs=1e-5)
    draws = np.asarray(log_uniform_candidates(100_000, vocabulary, 7))
    assert draws.min() >= 0 and draws.max() < vocabulary
    np.testing.assert_allclose(np.bincount(draws, minlength=vocabulary) / draws.size, q, atol=0.004)
    # TensorFlow's unique sampler: expected count -expm1(num_tries * log1p(-Q)); 30 distinct of 40 take > 30 tries
    sampled, true_expected, _ = tf.random.log_uniform_candidate_sampler(ids.reshape(-1, 1).astype("int64"), 1, 30, True, vocabulary, seed=5)
    p1 = true_expected.numpy()[:, 0]
    tries = np.log1p(-p1[-1]) / np.log1p(-q[-1])  # the number of draws TensorFlow made (from the rarest id: well conditioned)
    assert tries > 30 and tries == pytest.approx(round(tries), abs=1e-2)
    np.testing.assert_allclose(np.asarray(inclusion_probability(ids, int(round(tries)), vocabulary)), p1, rtol=1e-4)


def test_expectation_matches_full_softmax_when_the_sample_covers_the_vocabulary() -> None:
    """On a 40-word softmax and 32 rows (targets drawn as often as the sampler assumes), the
    sampled loss averaged over 300 independent candidate sets: with 400 draws (about 39.5 of the 40
    words in each set) it is the full softmax's cross-entropy within 0.5% in total and 0.15 nats
    on every row; with 40 draws it is lower (about 9%), the underestimate TensorFlow documents."""
    import tensorflow as tf

    from ptmkit_elmo.softmax import inclusion_probability, sampled_softmax_nll

    vocabulary, rows = 40, 32
    states, kernel, bias, _ = _problem(vocabulary, rows, seed=4)
    rng = np.random.default_rng(11)

    def draw(count: int) -> np.ndarray:  # the log-uniform inverse CDF, as log_uniform_candidates draws
        return np.clip(np.floor(np.exp(rng.random(count) * np.log(vocabulary + 1))) - 1, 0, vocabulary - 1).astype("int32")

    targets = draw(rows)
    logits = states.astype(np.float64) @ kernel + bias
    top = logits.max(1)
    full = np.log(np.exp(logits - top[:, None]).sum(1)) + top - logits[np.arange(rows), targets]
    means = {}
    for num_sampled in (40, 400):

        def loss(sampled: tf.Tensor, num_sampled: int = num_sampled) -> tf.Tensor:
            expected = inclusion_probability(sampled, num_sampled, vocabulary)
            return sampled_softmax_nll(states, targets, kernel, bias, sampled, inclusion_probability(targets, num_sampled, vocabulary), expected)

        step = tf.function(loss, autograph=False)
        means[num_sampled] = np.mean([step(tf.constant(draw(num_sampled))).numpy() for _ in range(300)], axis=0)
    assert means[400].sum() == pytest.approx(full.sum(), rel=0.005)
    assert np.abs(means[400] - full).max() < 0.15
    assert 0.85 * full.sum() < means[40].sum() < 0.95 * full.sum()


def test_vocabulary_ids_are_sorted_by_frequency() -> None:
    """The log-uniform sampler assumes id order is frequency order: after the 4 special tokens,
    each word of the vocabulary ptmkit builds occurs at least as often as the next."""
    from ptmkit_elmo.tokenizer import train_word_vocabulary

    texts = tiny_texts(300)
    tokenizer = train_word_vocabulary(texts, 200, 1, lowercase=False)
    counts = collections.Counter(word for text in texts for word in text.split())
    words = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])[4:]
    frequencies = [counts[word] for word, _ in words]
    assert len(frequencies) > 20 and frequencies == sorted(frequencies, reverse=True)


def _windows(tokenizer: object, texts: list[str], length: int, family: object) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """``<S> words </S>`` windows of ``texts``, right-padded: (declared inputs, token_ids, padding_mask)."""
    from ptmkit.api import derive_inputs
    from ptmkit_export.fields import tokenizer_character_table

    token_ids = np.zeros((len(texts), length), np.int32)
    for row, text in enumerate(texts):
        ids = tokenizer.encode(text).ids[:length]  # the post-processor wraps it in <S> .. </S>
        token_ids[row, : len(ids)] = ids
    mask = (token_ids != 0).astype(np.int32)
    return derive_inputs(family.inputs, token_ids, None, mask, tokenizer_character_table(tokenizer, 50)), token_ids, mask


def test_training_with_sampled_softmax_lowers_full_softmax_perplexity() -> None:
    """The objective's own graph (``prepare`` -> ``build``, targets as the extra input) trained
    for 20 steps with 24 candidates over a 120-word softmax: the held-out loss of ``evaluate``
    (the full softmax: equal to it by hand through the backbone's softmax layer) falls from about
    log(120) by more than 0.6 nats, and the last training loss (sampled) is below the full one."""
    import keras

    from ptmkit_elmo import ELMoFamily
    from ptmkit_elmo.backbone import ELMoBackbone
    from ptmkit_elmo.objectives import TARGETS_INPUT, BiLM, BiLMConfig, softmax_targets
    from ptmkit_elmo.tokenizer import train_word_vocabulary

    texts = tiny_texts(200)
    tokenizer = train_word_vocabulary(texts[:160], 300, 1, lowercase=False)
    family, objective, config = ELMoFamily(), BiLM(), BiLMConfig(softmax="sampled", num_sampled=24)
    specials = family.special_tokens(tokenizer)
    keras.utils.set_random_seed(5)
    backbone = ELMoBackbone(120, 50, 4, [1, 2, 3], [4, 4, 8], 0, 16, 16, 1, dropout=0.0)
    inputs = {"char_ids": keras.Input((None, 50), dtype="int32", name="char_ids"), "padding_mask": keras.Input((None,), dtype="int32", name="padding_mask")}
    extra, outputs, losses, _ = objective.build(backbone, inputs, config)
    model = keras.Model({**inputs, **extra}, outputs)
    model.compile(optimizer=keras.optimizers.Adam(2e-2), loss=losses)

    def batch(rows: list[str]) -> tuple[dict, dict, dict]:
        x, token_ids, mask = _windows(tokenizer, rows, 24, family)
        added, y, w = objective.prepare({"token_ids": token_ids, "padding_mask": mask}, np.random.default_rng(0), config, specials, tokenizer.get_vocab_size())
        assert set(added) == {TARGETS_INPUT}
        return {**x, **added}, y, {"bilm": w["bilm"] / w["bilm"].mean()}  # mean 1: the loss is the mean over real predictions

    heldout = batch(texts[160:])
    x, token_ids, mask = _windows(tokenizer, texts[160:], 24, family)
    out = backbone(x)
    targets, weights = heldout[0][TARGETS_INPUT], heldout[2]["bilm"]
    full = 0.0
    for direction, key in enumerate(("forward_output", "backward_output")):
        log_probs = np.asarray(keras.ops.log_softmax(backbone.logits(out[key]), axis=-1))
        picked = np.take_along_axis(log_probs, softmax_targets(targets[:, direction], 120, specials.unk)[..., None], axis=-1)[..., 0]
        full -= float((picked * weights[:, direction]).sum())
    full /= weights.size
    def evaluate(data: tuple[dict, dict, dict]) -> float:
        return float(model.evaluate(data[0], data[1], sample_weight=data[2], batch_size=len(texts), verbose=0))

    before = evaluate(heldout)
    assert before == pytest.approx(full, rel=1e-4) and before == pytest.approx(np.log(120), rel=0.05)
    train = batch(texts[:160])
    history = model.fit(train[0], train[1], sample_weight=train[2], batch_size=16, epochs=2, shuffle=True, verbose=0)
    after = evaluate(heldout)
    assert after < before - 0.6  # per-word perplexity down by more than 45%
    assert history.history["loss"][-1] < evaluate(train)  # the sampled loss underestimates the full one


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("objectives.bilm.softmax=hierarchical", r"config key 'objectives.bilm.softmax' must be one of full, sampled, got 'hierarchical'$"),
        ("objectives.bilm.num_sampled=0", r"config key 'objectives.bilm.num_sampled' must be > 0, got 0$"),
    ],
)
def test_bad_values_are_refused_in_one_line(override: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import re

    from ptmkit.testing import main

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a b c\n")
    assert main(["train", "elmo", "--corpus", str(corpus), "--out", str(tmp_path / "run"), "--set", override]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.search(message, err[0]), err


def test_as_many_candidates_as_words_is_refused() -> None:
    """``num_sampled`` must be below the softmax's size (a model key): refused when the
    objective is built, in one line naming both keys."""
    import keras

    from ptmkit.api import ConfigError
    from ptmkit_elmo.backbone import ELMoBackbone
    from ptmkit_elmo.objectives import BiLM, BiLMConfig

    backbone = ELMoBackbone(20, 50, 4, [1], [4], 0, 8, 8, 1, dropout=0.0)
    inputs = {"char_ids": keras.Input((None, 50), dtype="int32"), "padding_mask": keras.Input((None,), dtype="int32")}
    message = "config key 'objectives.bilm.num_sampled' = 20 must be less than 'model.vocabulary_size' = 20 (or set objectives.bilm.softmax = \"full\")"
    with pytest.raises(ConfigError) as raised:
        BiLM().build(backbone, inputs, BiLMConfig(softmax="sampled", num_sampled=20))
    assert str(raised.value) == message
