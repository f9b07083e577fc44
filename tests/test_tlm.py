"""XLM's translation LM (``--objective tlm --parallel FILE``): its statistics over many draws, the
pairs the sampler packs from a parallel file, a short run on the shipped en-de pairs, bad input.

Statistics are held to the paper's numbers within ~4 standard errors of a binomial, so each test
fails when the recipe is off, not by chance.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from tinyconfig import DATA, TINY

from ptmkit.cli import main
from ptmkit.contract import SpecialTokens
from ptmkit.objectives.tlm import TranslationLM, TranslationLMConfig, pair_positions

SPECIALS = SpecialTokens(pad=0, unk=1, cls=2, sep=3, mask=4)
VOCAB = 1000


def within(observed: float, expected: float, n: int, sigmas: float = 4.0) -> bool:
    return abs(observed - expected) <= sigmas * math.sqrt(expected * (1 - expected) / n)


def packed_pairs(rng: np.random.Generator, batch: int = 512, length: int = 64) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """``[CLS] source [SEP] target [SEP] pad...`` rows (BERT's packing) of random lengths: the
    batch and each row's first target position."""
    token_ids = np.zeros((batch, length), np.int32)
    segment_ids = np.zeros((batch, length), np.int32)
    padding_mask = np.zeros((batch, length), np.int32)
    first_target = np.zeros(batch, np.int64)
    for row in range(batch):
        source, target = (int(n) for n in rng.integers(3, (length - 3) // 2 + 1, size=2))
        ids = [SPECIALS.cls, *rng.integers(5, VOCAB, source), SPECIALS.sep, *rng.integers(5, VOCAB, target), SPECIALS.sep]
        token_ids[row, : len(ids)] = ids
        segment_ids[row, source + 2 : len(ids)] = 1
        padding_mask[row, : len(ids)] = 1
        first_target[row] = source + 2
    batch_arrays = {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}
    return batch_arrays, first_target


def test_tlm_masks_15_80_10_10_over_both_languages() -> None:
    batch, first_target = packed_pairs(np.random.default_rng(0))
    inputs, targets, weights = TranslationLM().prepare(batch, np.random.default_rng(1), TranslationLMConfig(), SPECIALS, VOCAB)
    predictions = math.ceil(0.15 * 64)
    assert inputs["token_ids"].shape == (512, 64) and inputs["token_ids"].dtype == np.int32
    assert inputs["mask_positions"].shape == targets["tlm"].shape == weights["tlm"].shape == (512, predictions)
    token_ids = batch["token_ids"]
    real = batch["padding_mask"].astype(bool) & ~np.isin(token_ids, SPECIALS.structural())
    rows, cols = np.nonzero(weights["tlm"])
    chosen = inputs["mask_positions"][rows, cols]
    assert real[rows, chosen].all()  # never a special token or padding
    assert within(rows.size / real.sum(), 0.15, int(real.sum()))
    np.testing.assert_array_equal(targets["tlm"][rows, cols], token_ids[rows, chosen])
    corrupted = inputs["token_ids"][rows, chosen]
    assert within(float(np.mean(corrupted == SPECIALS.mask)), 0.8, rows.size)
    assert within(float(np.mean(corrupted == token_ids[rows, chosen])), 0.1 + 0.1 / VOCAB, rows.size)
    # Masks fall in both sentences, in proportion to their real tokens.
    in_target = chosen >= first_target[rows]
    target_share = float((real & (batch["segment_ids"] == 1)).sum() / real.sum())
    assert within(float(in_target.mean()), target_share, rows.size)
    assert 0.3 < target_share < 0.7
    unchanged = np.ones_like(token_ids, bool)
    unchanged[rows, chosen] = False
    np.testing.assert_array_equal(inputs["token_ids"][unchanged], token_ids[unchanged])


def test_positions_restart_at_the_second_sentence_and_languages_follow_the_sides() -> None:
    batch, first_target = packed_pairs(np.random.default_rng(2), batch=64)
    inputs, _, _ = TranslationLM().prepare(batch, np.random.default_rng(3), TranslationLMConfig(), SPECIALS, VOCAB)
    positions, languages = inputs["position_ids"], inputs["language_ids"]
    assert positions.shape == languages.shape == (64, 64) and positions.dtype == languages.dtype == np.int32
    for row in range(64):
        start, end = int(first_target[row]), int(batch["padding_mask"][row].sum())
        np.testing.assert_array_equal(positions[row, :start], np.arange(start))  # [CLS] source [SEP]: 0 ..
        np.testing.assert_array_equal(positions[row, start:end], np.arange(end - start))  # target [SEP]: 0 again
        np.testing.assert_array_equal(languages[row, :start], 0)
        np.testing.assert_array_equal(languages[row, start:end], 1)
        np.testing.assert_array_equal(languages[row, end:], 0)  # padding
    # A row without a second sentence counts on from 0 and is all language 0.
    one = {"segment_ids": np.zeros((1, 5), np.int32), "padding_mask": np.array([[1, 1, 1, 0, 0]], np.int32)}
    positions, languages = pair_positions(one["segment_ids"], one["padding_mask"])
    assert positions.tolist() == [[0, 1, 2, 3, 4]] and languages.tolist() == [[0] * 5]


@pytest.mark.parametrize("pairs_name", ["en-de-dev.tsv", "en-fr-train-2k.tsv"])
def test_the_sampler_packs_each_pair_as_source_then_target(tmp_path: Path, pairs_name: str) -> None:
    from ptmkit.data.parallel import read_parallel
    from ptmkit.data.pretraining import InstanceSampler, corpus_texts, load_token_file, tokenize_corpus
    from ptmkit_bert import BertConfig, BertFamily

    pairs_file = tmp_path / "pairs.tsv"
    pairs_file.write_text("\n".join((DATA / "parallel" / pairs_name).read_text(encoding="utf-8").splitlines()[:61]) + "\n", encoding="utf-8")
    texts = list(corpus_texts(pairs_file, parallel_pairs=True))
    pairs = read_parallel(pairs_file)
    assert texts[:4] == [pairs.sources[0], pairs.targets[0], pairs.sources[1], pairs.targets[1]] and len(texts) == 120
    family = BertFamily()
    tokenizer = family.train_tokenizer(texts, BertConfig(vocabulary_size=400))
    summary = tokenize_corpus(texts, tokenizer, tmp_path / "tokens", len(texts), heldout_lines=21, line_group=2)
    assert summary["heldout"]["lines"] == 20 and summary["train"]["lines"] == 100  # whole pairs held out
    specials = family.special_tokens(tokenizer)
    sampler = InstanceSampler(load_token_file(tmp_path / "tokens", "train"), family, specials, 48, segment_pairs=False, parallel_pairs=True)
    assert sampler.num_pairs == 50 and sampler.starts(1000) == list(range(50))
    for index in (0, 7, 49):
        source = tokenizer.encode(pairs.sources[index], add_special_tokens=False).ids
        target = tokenizer.encode(pairs.targets[index], add_special_tokens=False).ids
        token_ids, segment_ids = sampler.pair(index)
        while len(source) + len(target) > 45:  # the longer side is cut first
            (source if len(source) > len(target) else target).pop()
        assert token_ids == [specials.cls, *source, specials.sep, *target, specials.sep]
        assert segment_ids == [0] * (len(source) + 2) + [1] * (len(target) + 1)
    batch = sampler.batch(np.random.default_rng(0), 16)
    assert batch["token_ids"].shape == (16, 48) and (batch["segment_ids"].max(axis=1) == 1).all()
    sampler.close()


def test_tlm_pretrains_bert_on_the_shipped_pairs(tmp_path: Path) -> None:
    pairs = tmp_path / "en-de.tsv"
    pairs.write_text("\n".join((DATA / "parallel" / "en-de-train-10k.tsv").read_text(encoding="utf-8").splitlines()[:401]) + "\n", encoding="utf-8")
    out = tmp_path / "run"
    sets = [a for s in [*TINY, "train.max_steps=30", "train.checkpoint_every=30", "train.learning_rate=3e-3", "train.sequence_length=48", "train.heldout_lines=40"] for a in ("--set", s)]
    assert main(["train", "bert", "--objective", "tlm", "--parallel", str(pairs), "--out", str(out), *sets]) == 0
    import json

    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["heldout_sequences"] == 20  # the last 20 pairs
    assert 3.0 < metrics["heldout_tlm_loss"] < math.log(600) - 0.1, metrics
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["objectives"] == ["tlm"] and manifest["inputs"] == ["token_ids", "segment_ids", "padding_mask"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["train", "bert", "--objective", "tlm"], "error: objective 'tlm' trains on sentence pairs: give --parallel FILE (SOURCE<TAB>TARGET lines)"),
        (
            ["train", "bert", "--objective", "tlm", "--corpus", str(DATA / "corpus" / "enwiki-106.txt")],
            "error: --corpus: objective 'tlm' trains on sentence pairs; give --parallel FILE (SOURCE<TAB>TARGET lines) instead",
        ),
        (
            ["train", "roberta", "--objective", "tlm", "--parallel", str(DATA / "parallel" / "en-de-dev.tsv")],
            "error: --objective: objective 'tlm' needs ['positions_and_languages', 'sequence_output', 'token_embedding'], which the roberta "
            "backbone does not provide (it provides ['pooled_output', 'sequence_output', 'token_embedding']); it supports "
            "['mlm', 'nsp', 'rtd', 'sop', 'span', 'sso', 'wso']",
        ),
        (
            ["train", "bert", "--objective", "tlm,nsp", "--parallel", str(DATA / "parallel" / "en-de-dev.tsv")],
            "error: --objective: objectives 'tlm' and 'nsp' both build the segment pairs of a batch; keep one of them",
        ),
    ],
    ids=["no-parallel", "corpus", "roberta", "tlm+nsp"],
)
def test_bad_tlm_input_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    out = tmp_path / "run"
    assert main([*argv, "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip() == message
    assert not out.exists()
