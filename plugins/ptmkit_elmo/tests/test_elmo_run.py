"""The elmo family through the core: held-out per-word perplexity by hand, the vocabulary's
warning, ``ptmkit config elmo``, and train -> fine-tune with frozen, mixed layers."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from inplugins import in_tree_plugins  # noqa: F401 - the fixture

from ptmkit.testing import tiny_texts, write_tiny_labelled

pytestmark = pytest.mark.usefixtures("in_tree_plugins")


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def test_word_perplexity_is_exp_of_the_mean_nll_by_hand() -> None:
    """Three lines scored in padded batches equal each line scored alone, by hand through the
    softmax's weights: exp(-sum log P(w_i) / words) each way, and their geometric mean; the
    softmax covers the 30 most frequent ids, the words beyond it are scored as <unk>."""
    import keras

    from ptmkit.api import HeldoutLines
    from ptmkit_elmo import ELMoFamily
    from ptmkit_elmo.backbone import ELMoBackbone
    from ptmkit_elmo.objectives import BiLM, BiLMConfig
    from ptmkit_elmo.tokenizer import train_word_vocabulary
    from ptmkit_export.fields import tokenizer_character_table

    tokenizer = train_word_vocabulary(tiny_texts(200), 60, 1, lowercase=False)
    vocabulary = tokenizer.get_vocab_size()
    keras.utils.set_random_seed(11)
    softmax = 30
    backbone = ELMoBackbone(softmax, 50, 4, [1, 2], [4, 4], 1, 8, 12, 2, dropout=0.0)
    backbone.softmax.set_weights([np.random.default_rng(0).normal(0, 0.5, (8, softmax)).astype("float32"), np.zeros(softmax, "float32")])
    family = ELMoFamily()
    specials = family.special_tokens(tokenizer)
    lines = ["the cat saw the bridge .", "a dog liked zebras", "the river crossed a red house at night again and again"]  # zebras: <unk>
    counts = np.arange(vocabulary, dtype=np.int64)
    heldout = HeldoutLines(lines, tokenizer, specials, family.inputs, 64, 2, counts)
    metrics = BiLM().score_lines(backbone, heldout, BiLMConfig())

    characters = tokenizer_character_table(tokenizer, 50)
    kernel, bias = (np.asarray(w, np.float64) for w in backbone.softmax.get_weights())
    nll = np.zeros(2)
    unigram_counts = counts[:softmax].astype(np.float64)
    unigram_counts[specials.unk] += counts[softmax:].sum()
    unigram_nll, beyond = 0.0, 0
    for text in lines:
        ids = [specials.bos, *tokenizer.encode(text, add_special_tokens=False).ids, specials.eos]
        out = backbone({"char_ids": characters[ids][None], "padding_mask": np.ones((1, len(ids)), np.int32)})
        forward = _log_softmax(np.asarray(out["forward_output"], np.float64)[0] @ kernel + bias)
        backward = _log_softmax(np.asarray(out["backward_output"], np.float64)[0] @ kernel + bias)
        for i in range(1, len(ids) - 1):  # the words: forward reads them from i - 1, backward from i + 1
            target = ids[i] if ids[i] < softmax else specials.unk
            nll[0] -= forward[i - 1, target]
            nll[1] -= backward[i + 1, target]
            unigram_nll -= math.log((unigram_counts[target] + 1) / (unigram_counts.sum() + softmax))
            beyond += ids[i] >= softmax
    words = sum(len(text.split()) for text in lines)
    unspelt = sum(word not in tokenizer.get_vocab() for text in lines for word in text.split())
    assert metrics["heldout_words"] == words == 21 and metrics["heldout_unspelt_words"] == unspelt >= 1 and beyond >= 1
    assert metrics["heldout_unknown_words"] == unspelt + beyond
    assert metrics["heldout_forward_word_perplexity"] == pytest.approx(math.exp(nll[0] / words), rel=1e-4)
    assert metrics["heldout_backward_word_perplexity"] == pytest.approx(math.exp(nll[1] / words), rel=1e-4)
    assert metrics["heldout_word_perplexity"] == pytest.approx(math.exp(nll.mean() / words), rel=1e-4)
    assert metrics["heldout_unigram_word_perplexity"] == pytest.approx(math.exp(unigram_nll / words), rel=1e-4)


def test_long_words_are_counted_in_a_warning() -> None:
    from ptmkit_elmo.tokenizer import train_word_vocabulary

    long_word = "x" * 51
    with pytest.warns(UserWarning, match=r"^1 of the vocabulary's \d+ words are longer than 50 UTF-8 bytes \(e.g. 'x{51}'\)"):
        tokenizer = train_word_vocabulary(["a b c", f"a {long_word} {'y' * 50}"], 100, 1, lowercase=False)
    assert tokenizer.token_to_id(long_word) is not None


def test_config_documents_every_key(capsys: pytest.CaptureFixture[str]) -> None:
    """``ptmkit config elmo``: every [model] key after a comment; ``--finetune``: the paper's head defaults."""
    import dataclasses

    from ptmkit.testing import main
    from ptmkit_elmo.config import ELMoConfig

    assert main(["config", "elmo"]) == 0
    lines = capsys.readouterr().out.splitlines()
    model = lines[lines.index("[model]") + 1 : lines.index("[train]")]
    keys = [line.split(" = ")[0] for line in model if " = " in line and not line.startswith("#")]
    assert keys == [f.name for f in dataclasses.fields(ELMoConfig)]
    assert all(model[model.index(line) - 1].startswith("#") for line in model if " = " in line and not line.startswith("#"))
    assert "[objectives.bilm]" in lines and "filter_counts = [16, 16, 32, 32, 64, 64, 64]" in lines
    bilm = lines[lines.index("[objectives.bilm]") + 1 :]
    assert [line for line in bilm if not line.startswith("#")][:2] == ['softmax = "full"', "num_sampled = 1024"]
    assert main(["config", "elmo", "--finetune"]) == 0
    tuned = capsys.readouterr().out.splitlines()
    assert {'layers = "mix"', "freeze_backbone = true", 'pooling = "mean"'} <= set(tuned)


def test_train_then_finetune_mixes_frozen_layers(elmo_run, tmp_path: Path) -> None:
    from ptmkit.api import RunDir, get_registry
    from ptmkit.testing import finetune, load_backbone, load_classifier

    run, _, metrics = elmo_run
    assert metrics["heldout_lines"] == 12 and metrics["heldout_words"] > 0
    assert math.isfinite(metrics["heldout_bilm_loss"]) and metrics["heldout_word_perplexity"] > 1.0
    assert metrics["heldout_word_perplexity"] == pytest.approx(
        math.sqrt(metrics["heldout_forward_word_perplexity"] * metrics["heldout_backward_word_perplexity"]), rel=1e-3
    )
    (tmp_path / "data").mkdir()
    train, dev = write_tiny_labelled(tmp_path / "data")
    tuned = finetune(run, train, dev, tmp_path / "tuned", overrides=["finetune.epochs=2", "finetune.batch_size=8", "finetune.learning_rate=1e-2"])
    assert tuned["labels"] == 2 and 0.0 <= tuned["dev_accuracy"] <= 1.0
    model, config, _, manifest = load_classifier(tmp_path / "tuned")
    assert manifest["head"] == "classification" and (config.head.layers, config.head.pooling, config.head.freeze_backbone) == ("mix", "mean", True)
    pretrained, _, _, _ = load_backbone(get_registry(), RunDir(run))
    tuned_backbone = model.get_layer(pretrained.name)
    for before, after in zip(pretrained.weights, tuned_backbone.weights, strict=True):  # frozen: not one weight moved
        np.testing.assert_array_equal(np.asarray(before), np.asarray(after))
    scalar_weights, gamma = model.get_layer("scalar_mix").get_weights()
    assert scalar_weights.shape == (3,) and (np.any(scalar_weights != 0.0) or gamma != 1.0)  # the mix learnt

