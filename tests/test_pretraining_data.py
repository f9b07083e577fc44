"""The tokenized corpus on disk and the instances drawn from it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ptmkit.data.pretraining import InstanceSampler, load_token_file, make_step, step_rng, tokenize_corpus
from ptmkit.plugins import get_registry


@pytest.fixture(scope="module")
def tokenized(tmp_path_factory: pytest.TempPathFactory, tiny_corpus: Path) -> tuple[Path, object]:
    from ptmkit_bert.tokenizer import train_wordpiece

    texts = tiny_corpus.read_text(encoding="utf-8").splitlines()
    tokenizer = train_wordpiece(texts, 600, lowercase=True)
    out = tmp_path_factory.mktemp("tokens")
    summary = tokenize_corpus(iter(texts), tokenizer, out, len(texts), heldout_lines=20)
    assert summary["train"]["lines"] == 380 and summary["heldout"]["lines"] == 20
    return out, tokenizer


def test_token_files_hold_the_corpus_in_order(tokenized: tuple[Path, object], tiny_corpus: Path) -> None:
    out, tokenizer = tokenized
    texts = tiny_corpus.read_text(encoding="utf-8").splitlines()
    train = load_token_file(out, "train")
    assert train.dtype == np.uint16  # a 600-token vocabulary fits
    expected = tokenizer.encode(texts[7], add_special_tokens=False).ids  # type: ignore[attr-defined]
    start, end = train.offsets[7], train.offsets[8]
    with open(train.path, "rb") as handle:
        got = train.read(handle.fileno(), int(start), int(end - start))
    assert got.tolist() == expected
    assert train.line_of(int(start)) == 7 and train.line_of(int(end) - 1) == 7


def test_single_segment_instances(tokenized: tuple[Path, object]) -> None:
    out, tokenizer = tokenized
    family = get_registry().family("bert")
    specials = family.special_tokens(tokenizer)
    sampler = InstanceSampler(load_token_file(out, "train"), family, specials, 32, segment_pairs=False)
    batch = sampler.batch(np.random.default_rng(0), 16)
    assert batch["token_ids"].shape == (16, 32)
    assert (batch["token_ids"][:, 0] == specials.cls).all() and (batch["token_ids"][:, -1] == specials.sep).all()
    assert (batch["padding_mask"] == 1).all() and (batch["segment_ids"] == 0).all()
    sampler.close()


def test_segment_pairs_for_next_sentence_prediction(tokenized: tuple[Path, object]) -> None:
    out, tokenizer = tokenized
    family = get_registry().family("bert")
    specials = family.special_tokens(tokenizer)
    tokens = load_token_file(out, "train")
    sampler = InstanceSampler(tokens, family, specials, 32, segment_pairs=True)
    rng = np.random.default_rng(3)
    with open(tokens.path, "rb") as handle:
        fd = handle.fileno()
        flags, random_differs = [], []
        for _ in range(400):
            start = int(rng.integers(0, tokens.num_tokens - 40))
            ids, segments, is_random, _ = sampler.instance(rng, start)
            flags.append(is_random)
            assert len(ids) == 32 and ids[0] == specials.cls and ids.count(specials.sep) == 2
            first_sep = ids.index(specials.sep)
            assert segments == [0] * (first_sep + 1) + [1] * (32 - first_sep - 1)
            first, second = ids[1:first_sep], ids[first_sep + 1 : -1]
            assert first == tokens.read(fd, start, len(first)).tolist()  # A is the text at `start`
            continuation = tokens.read(fd, start + len(first), len(second)).tolist()
            if is_random:
                random_differs.append(second != continuation)
            else:
                assert second == continuation  # B is the text that follows A
    assert np.mean(flags) == pytest.approx(0.5, abs=0.07)
    assert np.mean(random_differs) > 0.95  # a random B is another line's text
    sampler.close()


def test_batches_are_a_function_of_seed_and_step(tokenized: tuple[Path, object]) -> None:
    out, tokenizer = tokenized
    registry = get_registry()
    family = registry.family("bert")
    specials = family.special_tokens(tokenizer)
    objectives = {
        "mlm": (registry.objective("mlm"), registry.objective("mlm").config_class()),
        "nsp": (registry.objective("nsp"), registry.objective("nsp").config_class()),
    }
    sampler = InstanceSampler(load_token_file(out, "train"), family, specials, 32, segment_pairs=True)
    first = make_step(sampler, objectives, step_rng(42, 5), 8, 600, family.inputs)
    again = make_step(sampler, objectives, step_rng(42, 5), 8, 600, family.inputs)
    other = make_step(sampler, objectives, step_rng(42, 6), 8, 600, family.inputs)
    for a, b in zip(first, again, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])
    assert set(first[0]) == {"token_ids", "segment_ids", "padding_mask", "mask_positions"}
    assert set(first[1]) == {"mlm", "nsp"}
    assert not np.array_equal(first[0]["token_ids"], other[0]["token_ids"])
    sampler.close()


def test_heldout_lines_past_half_the_corpus_hold_out_a_tenth(tmp_path: Path, tiny_corpus: Path) -> None:
    """train.heldout_lines = 200 on a 50-line corpus trained on one line, silently: now a tenth
    is held out, with a warning that names the key."""
    from ptmkit_bert.tokenizer import train_wordpiece

    texts = tiny_corpus.read_text(encoding="utf-8").splitlines()[:50]
    tokenizer = train_wordpiece(texts, 300, lowercase=True)
    with pytest.warns(UserWarning, match=r"train.heldout_lines = 200 would hold out more than half of the corpus's 50 lines; holding out the last 5"):
        summary = tokenize_corpus(iter(texts), tokenizer, tmp_path, len(texts), heldout_lines=200)
    assert summary["train"]["lines"] == 45 and summary["heldout"]["lines"] == 5
