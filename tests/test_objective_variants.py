"""The survey's encoder objectives on BERT's backbone: static/dynamic and whole-word masked LM,
SpanBERT's span masking with its boundary objective, ALBERT's sentence-order prediction.

Statistics over many draws are held to their papers' numbers within ~4 standard errors of a
binomial (or of the mean), so each test fails when the recipe is off, not by chance.
"""

from __future__ import annotations

import math
import types
from pathlib import Path

import numpy as np
import pytest

from ptmkit.contract import SpecialTokens
from ptmkit.objectives.mlm import MaskedLMConfig, choose_ngrams, mask_tokens, ngram_length_probabilities, word_groups
from ptmkit.objectives.span import SpanMaskingConfig, choose_spans, mask_spans, runs, span_length_probabilities

SPECIALS = SpecialTokens(pad=0, unk=1, cls=2, sep=3, mask=4)
VOCAB = 1000


def within(observed: float, expected: float, n: int, sigmas: float = 4.0) -> bool:
    """``observed`` share of ``n`` Bernoulli draws is within ``sigmas`` standard errors of ``expected``."""
    return abs(observed - expected) <= sigmas * math.sqrt(expected * (1 - expected) / n)


def packed_words(rng: np.random.Generator, batch: int = 512, length: int = 128) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``[CLS] tokens [SEP] pad...`` rows whose words have 1-4 pieces: ``(token_ids, padding_mask,
    word_start)``, each ``(batch, length)`` int32."""
    token_ids = np.zeros((batch, length), np.int32)
    padding_mask = np.zeros((batch, length), np.int32)
    word_start = np.ones((batch, length), np.int32)
    for row in range(batch):
        n = int(rng.integers(20, length + 1))
        token_ids[row, 1 : n - 1] = rng.integers(5, VOCAB, size=n - 2)
        token_ids[row, 0], token_ids[row, n - 1] = SPECIALS.cls, SPECIALS.sep
        padding_mask[row, :n] = 1
        position = 1
        while position < n - 1:  # a word of 1-4 pieces: 1 then 0s
            pieces = int(rng.integers(1, 5))
            word_start[row, position + 1 : min(position + pieces, n - 1)] = 0
            position += pieces
    return token_ids, padding_mask, word_start


def real_tokens(token_ids: np.ndarray, padding_mask: np.ndarray) -> np.ndarray:
    return padding_mask.astype(bool) & ~np.isin(token_ids, SPECIALS.structural())


def words_of(row_ids: np.ndarray, row_mask: np.ndarray, row_starts: np.ndarray) -> list[np.ndarray]:
    return word_groups(np.flatnonzero(real_tokens(row_ids[None], row_mask[None])[0]), row_starts)


# -- static and dynamic masking ---------------------------------------------------------------------


def test_dynamic_masking_is_the_default_and_remasks_a_sequence_seen_again() -> None:
    assert MaskedLMConfig().masking == "dynamic" and SpanMaskingConfig().masking == "dynamic"
    token_ids, padding_mask, _ = packed_words(np.random.default_rng(0), batch=64)
    first = mask_tokens(token_ids, padding_mask, np.random.default_rng(1), MaskedLMConfig(), SPECIALS, VOCAB)
    again = mask_tokens(token_ids, padding_mask, np.random.default_rng(2), MaskedLMConfig(), SPECIALS, VOCAB)
    differs = [not np.array_equal(first[1][r], again[1][r]) for r in range(64)]
    assert all(differs)  # two draws of ~3-19 of ~20-126 positions agreeing has probability < 1e-3


def test_static_masking_fixes_the_mask_of_a_sequence() -> None:
    token_ids, padding_mask, _ = packed_words(np.random.default_rng(0), batch=64)
    once = MaskedLMConfig(masking="static", dupe_factor=1)
    first = mask_tokens(token_ids, padding_mask, np.random.default_rng(1), once, SPECIALS, VOCAB)
    # The same sequences at another step, in another order within the batch: the same masks.
    order = np.random.default_rng(3).permutation(64)
    again = mask_tokens(token_ids[order], padding_mask[order], np.random.default_rng(2), once, SPECIALS, VOCAB)
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a[order], b)


def test_static_masking_draws_from_dupe_factor_copies() -> None:
    """BERT's dupe_factor = 10: a sequence seen 400 times shows exactly 10 masks, ~1/10 each."""
    token_ids, padding_mask, _ = packed_words(np.random.default_rng(0), batch=1)
    config = MaskedLMConfig(masking="static")
    assert config.dupe_factor == 10
    seen: dict[bytes, int] = {}
    for step in range(400):
        _, positions, _, _ = mask_tokens(token_ids, padding_mask, np.random.default_rng([7, step]), config, SPECIALS, VOCAB)
        seen[positions.tobytes()] = seen.get(positions.tobytes(), 0) + 1
    assert len(seen) == 10  # P(a copy never drawn in 400) = 10 * 0.9^400 < 1e-17
    assert all(within(count / 400, 0.1, 400) for count in seen.values())


def test_static_masking_keeps_bert_15_80_10_10() -> None:
    token_ids, padding_mask, _ = packed_words(np.random.default_rng(0))
    config = MaskedLMConfig(masking="static")
    masked, positions, ids, weights = mask_tokens(token_ids, padding_mask, np.random.default_rng(1), config, SPECIALS, VOCAB)
    real = real_tokens(token_ids, padding_mask)
    rows, cols = np.nonzero(weights)
    chosen = positions[rows, cols]
    assert real[rows, chosen].all()
    assert within(weights.sum() / real.sum(), 0.15, int(real.sum()))
    corrupted = masked[rows, chosen]
    n = rows.size
    assert within(float(np.mean(corrupted == SPECIALS.mask)), 0.8, n)
    assert within(float(np.mean(corrupted == token_ids[rows, chosen])), 0.1 + 0.1 / VOCAB, n)


# -- ALBERT's n-gram masking -----------------------------------------------------------------------


def test_ngram_length_probabilities_are_alberts() -> None:
    np.testing.assert_allclose(ngram_length_probabilities(3), [6 / 11, 3 / 11, 2 / 11])
    np.testing.assert_allclose(ngram_length_probabilities(1), [1.0])


def test_ngram_lengths_are_drawn_from_p_n() -> None:
    # The first n-gram of a sequence is drawn before any budget cut or overlap: its length is p(n).
    rng = np.random.default_rng(0)
    units = [np.array([i]) for i in range(512)]
    first = [choose_ngrams(units, 3, 3, rng)[1][0] for _ in range(6000)]
    shares = np.bincount(first, minlength=4)[1:] / len(first)
    for observed, expected in zip(shares, ngram_length_probabilities(3), strict=True):
        assert within(float(observed), float(expected), len(first))


def test_ngram_lengths_over_a_whole_budget_stay_near_p_n() -> None:
    # Every n-gram of 15% budgets: shortened only near the budget's end and when overlapping one
    # chosen already (ALBERT's rule), so the shares stay within 0.03 of p(n), shorter ones a bit more.
    rng = np.random.default_rng(1)
    units = [np.array([i]) for i in range(512)]
    lengths = [n for _ in range(200) for n in choose_ngrams(units, 77, 3, rng)[1]]
    shares = np.bincount(lengths, minlength=4)[1:] / len(lengths)
    np.testing.assert_allclose(shares, ngram_length_probabilities(3), atol=0.03)
    assert shares[0] >= ngram_length_probabilities(3)[0]


def test_ngram_masking_takes_whole_words_and_keeps_bert_15_80_10_10() -> None:
    token_ids, padding_mask, word_start = packed_words(np.random.default_rng(0))
    config = MaskedLMConfig(whole_word=True, max_ngram=3)
    masked, positions, ids, weights = mask_tokens(token_ids, padding_mask, np.random.default_rng(1), config, SPECIALS, VOCAB, word_start)
    selected = np.zeros_like(token_ids, bool)
    rows, cols = np.nonzero(weights)
    selected[rows, positions[rows, cols]] = True
    real = real_tokens(token_ids, padding_mask)
    assert real[selected].all()
    assert within(selected.sum() / real.sum(), 0.15, int(real.sum()))
    partial = sum(
        0.0 < selected[row, word].mean() < 1.0 for row in range(len(token_ids)) for word in words_of(token_ids[row], padding_mask[row], word_start[row])
    )
    assert partial == 0
    np.testing.assert_array_equal(ids[rows, cols], token_ids[rows, positions[rows, cols]])
    corrupted = masked[rows, positions[rows, cols]]
    assert within(float(np.mean(corrupted == SPECIALS.mask)), 0.8, rows.size)
    assert within(float(np.mean(corrupted == token_ids[rows, positions[rows, cols]])), 0.1 + 0.1 / VOCAB, rows.size)
    # n-grams are contiguous: runs of masked words are longer than whole-word masking's.
    _, single_positions, _, single_weights = mask_tokens(
        token_ids, padding_mask, np.random.default_rng(1), MaskedLMConfig(whole_word=True), SPECIALS, VOCAB, word_start
    )
    assert runs_per_mask(selected) < 0.9 * runs_per_mask(single_selection(single_positions, single_weights))


def single_selection(positions: np.ndarray, weights: np.ndarray) -> np.ndarray:
    selected = np.zeros((len(weights), 128), bool)
    rows, cols = np.nonzero(weights)
    selected[rows, positions[rows, cols]] = True
    return selected


def runs_per_mask(selected: np.ndarray) -> float:
    starts = selected[:, 1:] & ~selected[:, :-1]
    return float((starts.sum() + selected[:, 0].sum()) / selected.sum())


def test_max_ngram_below_one_is_refused() -> None:
    from ptmkit.errors import ConfigError

    with pytest.raises(ConfigError, match="objectives.mlm.max_ngram"):
        MaskedLMConfig(max_ngram=0).validate()


# -- whole-word masking -----------------------------------------------------------------------------


def test_whole_word_masking_masks_no_partial_word() -> None:
    token_ids, padding_mask, word_start = packed_words(np.random.default_rng(0))
    config = MaskedLMConfig(whole_word=True)
    masked, positions, ids, weights = mask_tokens(token_ids, padding_mask, np.random.default_rng(1), config, SPECIALS, VOCAB, word_start)
    selected = np.zeros_like(token_ids, bool)
    rows, cols = np.nonzero(weights)
    selected[rows, positions[rows, cols]] = True
    partial = whole = 0
    for row in range(len(token_ids)):
        for word in words_of(token_ids[row], padding_mask[row], word_start[row]):
            share = selected[row, word].mean()
            partial += 0.0 < share < 1.0
            whole += share == 1.0 and word.size > 1
    assert partial == 0 and whole > 1000  # multi-piece words are masked, always whole
    real = real_tokens(token_ids, padding_mask)
    assert within(selected.sum() / real.sum(), 0.15, int(real.sum()))
    np.testing.assert_array_equal(ids[rows, cols], token_ids[rows, positions[rows, cols]])
    # Google's whole-word masking still replaces each piece 80/10/10 on its own.
    corrupted = masked[rows, positions[rows, cols]]
    assert within(float(np.mean(corrupted == SPECIALS.mask)), 0.8, rows.size)


def test_whole_word_masking_needs_word_starts() -> None:
    token_ids, padding_mask, _ = packed_words(np.random.default_rng(0), batch=2)
    with pytest.raises(ValueError, match="word_start"):
        mask_tokens(token_ids, padding_mask, np.random.default_rng(1), MaskedLMConfig(whole_word=True), SPECIALS, VOCAB)


def test_a_word_never_runs_across_a_special_token() -> None:
    # B's first piece continues a word (the window cut it): it must not join A's last word over [SEP].
    positions = np.array([1, 2, 3, 5, 6])  # [SEP] at 4
    word_start = np.array([0, 1, 0, 1, 9, 0, 1])
    assert [w.tolist() for w in word_groups(positions, word_start)] == [[1, 2], [3], [5], [6]]


def test_word_start_table_agrees_with_the_tokenizers_word_ids(tmp_path: Path) -> None:
    """The table read from the WordPiece model's ``##`` prefix gives the word boundaries of the
    tokenizer's own ``word_ids`` on the shipped corpus."""
    from tinyconfig import DATA

    from ptmkit.data.tokenization import word_start_table
    from ptmkit_bert.tokenizer import train_wordpiece

    lines = (DATA / "corpus" / "enwiki-106.txt").read_text(encoding="utf-8").splitlines()[:300]
    tokenizer = train_wordpiece(lines[:200], 600, True)
    table = word_start_table(tokenizer)
    assert table is not None and table.shape == (tokenizer.get_vocab_size(),)
    continuations = 0
    for encoding in tokenizer.encode_batch(lines[200:], add_special_tokens=False):
        word_ids = np.array(encoding.word_ids)
        expected = np.concatenate([[True], word_ids[1:] != word_ids[:-1]])
        np.testing.assert_array_equal(table[encoding.ids], expected)
        continuations += int((~expected).sum())
    assert continuations > 1000  # a 600-token vocabulary splits many words


def test_a_unigram_tokenizers_word_starts_follow_alberts_start_pieces() -> None:
    """A SentencePiece-style (``Metaspace``) unigram tokenizer: a piece begins a word where the
    tokenizer's ``word_ids`` start a new word, or where it is a lone punctuation piece (ALBERT's
    ``_is_start_piece``), on the shipped corpus."""
    from tinyconfig import DATA

    from ptmkit.data.tokenization import SENTENCEPIECE_START_PIECES, word_start_table
    from ptmkit.data.unigram import train_unigram

    lines = (DATA / "corpus" / "enwiki-106.txt").read_text(encoding="utf-8").splitlines()[:300]
    tokenizer = train_unigram(lines[:200], 600, ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"], "<unk>")
    table = word_start_table(tokenizer)
    assert table is not None and table.shape == (tokenizer.get_vocab_size(),)
    continuations = 0
    for encoding in tokenizer.encode_batch(lines[200:], add_special_tokens=False):
        word_ids = np.array(encoding.word_ids)
        punctuation = np.array([token in SENTENCEPIECE_START_PIECES for token in encoding.tokens])
        unknown = np.array(encoding.ids) == tokenizer.token_to_id("<unk>")  # "<unk>" starts with "<"
        expected = np.concatenate([[True], word_ids[1:] != word_ids[:-1]]) | punctuation | unknown
        np.testing.assert_array_equal(table[encoding.ids], expected)
        continuations += int((~expected).sum())
    assert continuations > 1000


# -- SpanBERT span masking and the span-boundary objective ------------------------------------------


def test_span_lengths_follow_the_truncated_geometric_in_words() -> None:
    """SpanBERT: Geo(0.2) clipped at 10 words has mean 3.8 (the paper's number). Spans over a long
    sequence of 1-3-piece words (low density, so that spans rarely touch) are measured in words."""
    probabilities = span_length_probabilities(0.2, 10)
    lengths = np.arange(1, 11)
    mean = float(probabilities @ lengths)
    assert mean == pytest.approx(3.8, abs=0.005)  # 3.7971
    sd = math.sqrt(float(probabilities @ lengths**2) - mean**2)
    rng = np.random.default_rng(0)
    pieces = rng.integers(1, 4, size=120_000)
    ends = np.cumsum(pieces)
    words = np.split(np.arange(ends[-1]), ends[:-1])
    word_of = np.repeat(np.arange(len(words)), pieces)
    spans = []
    for draw in range(36):
        chosen = choose_spans(words, 1000, np.random.default_rng([1, draw]), probabilities)
        for span in runs(chosen):
            first, last = word_of[span[0]], word_of[span[-1]]
            assert span[0] == words[first][0] and span[-1] == words[last][-1]  # whole words
            spans.append(last - first + 1)
    assert len(spans) > 4000
    assert abs(np.mean(spans) - mean) < 4 * sd / math.sqrt(len(spans))
    assert max(spans) <= 20  # 10, or two spans that touch


def test_span_masking_budget_replacement_and_boundaries() -> None:
    token_ids, padding_mask, word_start = packed_words(np.random.default_rng(0))
    out = mask_spans(token_ids, padding_mask, word_start, np.random.default_rng(1), SpanMaskingConfig(), SPECIALS, VOCAB)
    real = real_tokens(token_ids, padding_mask)
    rows, cols = np.nonzero(out["mask_weights"])
    positions = out["mask_positions"][rows, cols]
    assert real[rows, positions].all()
    assert within(rows.size / real.sum(), 0.15, int(real.sum()))
    np.testing.assert_array_equal(out["mask_ids"][rows, cols], token_ids[rows, positions])
    selected = np.zeros_like(real)
    selected[rows, positions] = True
    outcomes = {"mask": 0, "random": 0, "kept": 0}
    for row in range(len(token_ids)):
        for word in words_of(token_ids[row], padding_mask[row], word_start[row]):
            assert selected[row, word].all() or not selected[row, word].any()  # whole words only
        for span in runs(np.flatnonzero(selected[row])):
            now, before = out["token_ids"][row, span], token_ids[row, span]
            if (now == SPECIALS.mask).all():
                outcomes["mask"] += 1
            elif (now == before).all():
                outcomes["kept"] += 1
            else:
                outcomes["random"] += 1
    spans = sum(outcomes.values())
    # Replacement is per span (SpanBERT): a span is all [MASK], all kept, or random tokens.
    assert within(outcomes["mask"] / spans, 0.8, spans) and within(outcomes["kept"] / spans, 0.1, spans, 5)
    assert within(outcomes["random"] / spans, 0.1, spans, 5)
    untouched = ~selected
    np.testing.assert_array_equal(out["token_ids"][untouched], token_ids[untouched])
    # The boundary objective reads the unmasked tokens around each span and the offset in it.
    left, right = out["boundary_left"][rows, cols], out["boundary_right"][rows, cols]
    offsets = out["span_offsets"][rows, cols]
    assert not selected[rows, left].any() and not selected[rows, right].any()
    assert (positions - left - 1 == offsets).all() and (left < positions).all() and (positions < right).all()
    assert selected[rows, left + 1].all() and selected[rows, right - 1].all()
    assert (out["boundary_weights"][rows, cols] == 1).all()  # [CLS]/[SEP] bound every span here


def test_span_boundary_head_shapes_and_tied_output() -> None:
    import keras
    import keras_hub

    from ptmkit.objectives.span_layers import SpanBoundaryHead

    embedding = keras_hub.layers.ReversibleEmbedding(50, 8)
    embedding.build((None, None))
    head = SpanBoundaryHead(50, embedding, max_positions=4)
    sequence = np.random.default_rng(0).normal(size=(2, 7, 8)).astype("float32")
    left, right, offsets = (np.array(v, np.int32) for v in ([[0, 0, 3]] * 2, [[3, 3, 6]] * 2, [[0, 1, 0]] * 2))
    logits = keras.ops.convert_to_numpy(head(sequence, left, right, offsets))
    assert logits.shape == (2, 3, 50)
    # Two layers of GeLU + LayerNorm, then x @ E^T + b: recompute with NumPy from the weights.
    x = np.concatenate([sequence[0, [0, 0, 3]], sequence[0, [3, 3, 6]], keras.ops.convert_to_numpy(head._position_embedding.embeddings)[[0, 1, 0]]], -1)
    for dense, norm in zip(head._dense, head._layer_norm, strict=True):
        kernel, bias = (keras.ops.convert_to_numpy(w) for w in dense.weights)
        h = x @ kernel + bias
        h = 0.5 * h * (1 + np.vectorize(math.erf)(h / math.sqrt(2)))
        gamma, beta = (keras.ops.convert_to_numpy(w) for w in norm.weights)
        x = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + norm.epsilon) * gamma + beta
    expected = x @ keras.ops.convert_to_numpy(embedding.embeddings).T + keras.ops.convert_to_numpy(head._bias)
    np.testing.assert_allclose(logits[0], expected, atol=1e-4)
    # get_config holds every __init__ argument: the layer comes back from it, weights and all.
    clone = SpanBoundaryHead.from_config(head.get_config())
    clone.token_embedding.build((None, None))
    clone(sequence, left, right, offsets)
    clone.token_embedding.set_weights(embedding.get_weights())
    clone.set_weights(head.get_weights())
    np.testing.assert_allclose(keras.ops.convert_to_numpy(clone(sequence, left, right, offsets)), logits, atol=1e-6)


# -- ALBERT's sentence-order prediction --------------------------------------------------------------


class _RangeTokenizer:
    """Line ``"start count"`` encodes to ids ``start .. start + count - 1``: every id is unique, so
    a test can tell where in the corpus a segment came from."""

    def get_vocab_size(self) -> int:
        return 60_000

    def encode_batch(self, texts: list[str], add_special_tokens: bool = False) -> list[types.SimpleNamespace]:
        encoded = []
        for text in texts:
            start, count = map(int, text.split())
            encoded.append(types.SimpleNamespace(ids=list(range(start, start + count))))
        return encoded


def test_sentence_order_pairs_are_consecutive_segments_swapped_half_the_time(tmp_path: Path) -> None:
    from ptmkit.data.pretraining import InstanceSampler, load_token_file, tokenize_corpus
    from ptmkit_bert import BertFamily

    rng = np.random.default_rng(0)
    lines, start = [], 5
    for count in rng.integers(3, 90, size=200):
        lines.append(f"{start} {count}")
        start += int(count)
    tokenize_corpus(lines, _RangeTokenizer(), tmp_path, len(lines), 0)
    tokens = load_token_file(tmp_path, "train")
    sampler = InstanceSampler(tokens, BertFamily(), SPECIALS, 32, segment_pairs=True, random_next_rate=0.0, swap_rate=0.5)
    batch = sampler.batch(np.random.default_rng(1), 2000)
    sampler.close()
    assert not batch["is_random_next"].any()
    swapped = batch["is_swapped"]
    assert within(float(swapped.mean()), 0.5, 2000)
    for ids, segments, flag in zip(batch["token_ids"], batch["segment_ids"], swapped, strict=True):
        ids = ids[batch_length(ids)]
        seps = np.flatnonzero(ids == SPECIALS.sep)
        first, second = ids[1 : seps[0]].tolist(), ids[seps[0] + 1 : seps[1]].tolist()
        assert first and second and segments[seps[0] + 1] == 1
        a, b = (second, first) if flag else (first, second)
        text = a + b  # unswapped order: consecutive ids, the whole window
        assert text == list(range(text[0], text[0] + len(text))) and len(text) == 32 - 3


def batch_length(ids: np.ndarray) -> slice:
    return slice(0, int(np.flatnonzero(ids != SPECIALS.pad)[-1]) + 1)


def _range_corpus(directory: Path, lengths: list[int]) -> Path:
    """A tokenized corpus whose token at offset ``i`` has id ``5 + i`` (after BERT's five specials)."""
    from ptmkit.data.pretraining import tokenize_corpus

    lines, start = [], 5
    for count in lengths:
        lines.append(f"{start} {count}")
        start += count
    tokenize_corpus(lines, _RangeTokenizer(), directory, len(lines), 0)
    return directory


@pytest.mark.parametrize("masking", ["static", "dynamic"])
def test_a_sequence_drawn_again_keeps_its_static_mask_and_gets_a_new_dynamic_one(tmp_path: Path, masking: str) -> None:
    """Through the training pipeline (sampler + make_step): static masking draws BERT's fixed
    instances (the corpus tiled into 30-token windows) with fixed masks; dynamic masking re-masks
    an instance drawn again (here forced onto the same fixed windows, to meet it twice)."""
    from ptmkit.data.pretraining import InstanceSampler, load_token_file, make_step, sampler_options, step_rng
    from ptmkit.plugins import get_registry
    from ptmkit.training.pretrain import resolve_config, selected_objectives
    from ptmkit_bert import BertFamily

    registry = get_registry()
    config = resolve_config(registry, "bert", None, [f"objectives.mlm.masking={masking}", "objectives.mlm.dupe_factor=1"])
    objectives = selected_objectives(registry, config)
    options = sampler_options(objectives)
    assert options["fixed_windows"] == (masking == "static")
    tokens = load_token_file(_range_corpus(tmp_path, [20] * 40), "train")
    sampler = InstanceSampler(tokens, BertFamily(), SPECIALS, 32, **{**options, "fixed_windows": True})
    sightings: dict[bytes, list[bytes]] = {}
    for step in range(20):
        x, y, w = make_step(sampler, objectives, step_rng(1, step), 16, 60_000, BertFamily.inputs)
        for row in range(16):
            chosen = x["mask_positions"][row, w["mlm"][row] > 0]
            original = x["token_ids"][row].copy()
            original[chosen] = y["mlm"][row, w["mlm"][row] > 0]
            assert (original[1] - 5) % 30 == 0  # a tile's start
            sightings.setdefault(original.tobytes(), []).append(chosen.tobytes() + x["token_ids"][row].tobytes())
    sampler.close()
    repeated = [masks for masks in sightings.values() if len(masks) > 1]
    assert len(sightings) <= 26 and len(repeated) >= 20  # 320 draws of 26 tiles
    same = [len(set(masks)) == 1 for masks in repeated]
    assert all(same) if masking == "static" else not any(same)
