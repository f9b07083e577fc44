"""XLNet's permutation LM (:mod:`ptmkit.objectives.plm`): its statistics over many draws (each
order a permutation, the predicted share 1/K, the predicted tokens last in the order, every order
and every predicted position equally likely), the two streams' masks (shapes, values: the content
stream sees itself and what precedes it in the order, the query stream not itself), the target
mapping, and its config: paper defaults, bad values and a sequence length the blocks do not divide
refused in one line."""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path

import numpy as np
import pytest

from ptmkit.contract import SpecialTokens
from ptmkit.objectives.plm import (
    PermutationLM,
    PermutationLMConfig,
    attention_masks,
    permutation_batch,
    permutation_order,
)

SPECIALS = SpecialTokens(unk=0, bos=1, eos=2, cls=3, sep=4, pad=5, mask=6)


def packed_batch(rng: np.random.Generator, batch: int, length: int) -> dict[str, np.ndarray]:
    """XLNet-packed rows ``A <sep> <cls>`` of random real lengths, right-padded with ``<pad>``."""
    ids = np.full((batch, length), SPECIALS.pad, np.int32)
    mask = np.zeros((batch, length), np.int32)
    for row in range(batch):
        real = int(rng.integers(3, length + 1))
        ids[row, : real - 2] = rng.integers(10, 100, real - 2)
        ids[row, real - 2 : real] = (SPECIALS.sep, SPECIALS.cls)
        mask[row, :real] = 1
    return {"token_ids": ids, "segment_ids": np.zeros_like(ids), "padding_mask": mask}


def test_defaults_are_xlnets() -> None:
    config = PermutationLMConfig()
    assert (config.partial_prediction, config.perm_size) == (6.0, 0)  # appendix A.3: K = 6; the whole sequence
    assert config.predictions(512) == 85  # the reference implementation's num_predict at seq_len 512


def test_orders_are_permutations_and_the_predicted_sixth_comes_last() -> None:
    rng = np.random.default_rng(0)
    config = PermutationLMConfig()
    predicted = candidates = 0
    for _ in range(50):
        batch = packed_batch(rng, 8, 48)
        structural = np.isin(batch["token_ids"], SPECIALS.structural())
        rank, target = permutation_order(batch["padding_mask"], structural, rng, config)
        for row in range(8):
            assert sorted(rank[row]) == list(range(48))  # each position exactly once
            real = batch["padding_mask"][row].astype(bool)
            n = int(real.sum())
            assert set(rank[row, real]) == set(range(n))  # padding after every real token
            assert not (target[row] & structural[row]).any() and not (target[row] & ~real).any()
            count = int(target[row].sum())
            assert set(rank[row, target[row]]) == set(range(n - count, n))  # the predicted are the last
            assert count == min(max(1, round((n - 2) / 6)), n - 1)
            predicted += count
            candidates += n - 2
    assert abs(predicted / candidates - 1 / 6) < 0.01


def test_every_order_and_target_is_equally_likely() -> None:
    """Five real tokens, K = 5 (one predicted): each of the 5 positions is predicted 1/5 of the
    time, and the 24 orders of the other four are uniform (chi-square against 4!)."""
    rng = np.random.default_rng(1)
    config = PermutationLMConfig(partial_prediction=5.0)
    mask = np.ones((4000, 5), np.int32)
    rank, target = permutation_order(mask, np.zeros((4000, 5), bool), rng, config)
    assert (target.sum(axis=1) == 1).all()
    share = target.mean(axis=0)
    assert np.all(np.abs(share - 0.2) < 0.03), share
    counts: dict[tuple[int, ...], int] = {}
    for row in range(4000):
        key = tuple(np.argsort(rank[row]))
        counts[key] = counts.get(key, 0) + 1
    assert len(counts) == 120  # every permutation with the target last occurs
    expected = 4000 / 120
    chi2 = sum((c - expected) ** 2 / expected for c in counts.values())
    assert chi2 < 170  # 119 degrees of freedom: the 0.999 quantile is 170.9


def test_masks_content_sees_itself_and_earlier_query_not_itself() -> None:
    rank = np.array([[2, 0, 3, 1]], np.int32)  # order: 1, 3, 0, 2
    content, query = attention_masks(rank)
    assert content.shape == query.shape == (1, 4, 4) and content.dtype == query.dtype == np.int32
    expected_query = np.array(
        [
            [0, 1, 0, 1],  # position 0 (third) sees 1 and 3
            [0, 0, 0, 0],  # position 1 (first) sees nothing
            [1, 1, 0, 1],  # position 2 (last) sees every other
            [0, 1, 0, 0],  # position 3 (second) sees 1
        ]
    )
    np.testing.assert_array_equal(query[0], expected_query)
    np.testing.assert_array_equal(content[0], expected_query + np.eye(4, dtype=np.int32))
    rng = np.random.default_rng(2)
    batch = packed_batch(rng, 16, 32)
    inputs, ids, weights = permutation_batch(batch, rng, PermutationLMConfig(), SPECIALS)
    content, query = attention_masks(inputs["permutation_rank"])
    assert np.all(np.diagonal(content, axis1=1, axis2=2) == 1) and np.all(np.diagonal(query, axis1=1, axis2=2) == 0)
    assert np.array_equal(content - query, np.broadcast_to(np.eye(32, dtype=np.int32), content.shape))
    # both are strict/non-strict orders: antisymmetric, and j visible to i means what j sees is too
    assert not np.any(query & np.transpose(query, (0, 2, 1)))
    assert np.all(np.einsum("bij,bjk->bik", query, query) <= 32 * query)  # transitive
    assert query.sum(axis=(1, 2)).tolist() == [32 * 31 // 2] * 16  # a total order: one pair of two, once


def test_target_mapping_rows_pick_the_predicted_tokens() -> None:
    rng = np.random.default_rng(3)
    batch = packed_batch(rng, 32, 40)
    inputs, ids, weights = permutation_batch(batch, rng, PermutationLMConfig(), SPECIALS)
    mapping = inputs["target_mapping"]
    assert mapping.shape == (32, 7, 40) and mapping.dtype == np.float32 and ids.shape == weights.shape == (32, 7)
    assert np.array_equal(mapping.sum(axis=2), weights)  # one-hot rows, all-zero rows unweighted
    picked = np.einsum("bps,bs->bp", mapping, batch["token_ids"].astype(np.float32))
    assert np.array_equal(picked * weights, ids * weights)
    _, query = attention_masks(inputs["permutation_rank"])
    for row in range(32):  # a predicted token sees neither itself nor any token predicted after it
        for slot in np.flatnonzero(weights[row]):
            position = int(np.argmax(mapping[row, slot]))
            assert query[row, position, position] == 0
            assert query[row, position, batch["padding_mask"][row] == 1].sum() >= 1  # some context


@pytest.mark.parametrize(("perm_size", "length"), [(8, 32), (16, 48)])
def test_blocks_are_permuted_in_sequence_order(perm_size: int, length: int) -> None:
    rng = np.random.default_rng(4)
    config = PermutationLMConfig(perm_size=perm_size)
    mask = np.ones((200, length), np.int32)
    rank, target = permutation_order(mask, np.zeros_like(mask, bool), rng, config)
    for start, stop in itertools.pairwise(range(0, length + 1, perm_size)):
        assert set(np.unique(rank[:, start:stop])) == set(range(start, stop))  # block b fills ranks of block b
        assert (target[:, start:stop].sum(axis=1) == round(perm_size / 6)).all()
    assert config.predictions(length) == (length // perm_size) * round(perm_size / 6)


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"partial_prediction": 0.5}, "'objectives.plm.partial_prediction' must be >= 1"),
        ({"perm_size": -1}, "'objectives.plm.perm_size' must be >= 0"),
    ],
)
def test_bad_values_are_refused(changes: dict, needle: str) -> None:
    from ptmkit.errors import ConfigError

    with pytest.raises(ConfigError, match=needle.replace("(", r"\(")):
        PermutationLMConfig(**changes).validate()


def test_a_length_the_blocks_do_not_divide_is_refused_before_training() -> None:
    from ptmkit.errors import ConfigError

    objective = PermutationLM()
    objective.check_sequence_length(PermutationLMConfig(perm_size=16), 64, "--set")
    objective.check_sequence_length(PermutationLMConfig(), 37, "--set")
    with pytest.raises(ConfigError) as error:
        objective.check_sequence_length(PermutationLMConfig(perm_size=24), 64, "--set")
    message = str(error.value)
    assert "\n" not in message and message.startswith("--set: ")
    assert "'objectives.plm.perm_size' = 24 must divide 'train.sequence_length' = 64" in message
    assert math.isclose(PermutationLMConfig(partial_prediction=7).predictions(70), 10)


def test_a_clash_set_in_the_config_file_names_the_file_not_only_set(tmp_path: Path) -> None:
    """perm_size from the file and a --set that does not touch it: the error named --set alone."""
    from ptmkit.errors import ConfigError
    from ptmkit.plugins import get_registry
    from ptmkit.training.pretrain import resolve_config

    bad, good = tmp_path / "bad.toml", tmp_path / "good.toml"
    bad.write_text("[train]\nsequence_length = 32\n[objectives.plm]\nperm_size = 5\n")
    good.write_text("[train]\nsequence_length = 30\n[objectives.plm]\nperm_size = 5\n")
    for path, overrides, source in ((bad, [], f"{bad}"), (bad, ["train.max_steps=3"], f"{bad} and --set"), (good, ["train.sequence_length=32"], "--set")):
        with pytest.raises(ConfigError, match=f"^{re.escape(source)}: config key 'objectives.plm.perm_size' = 5 must divide 'train.sequence_length' = 32 "):
            resolve_config(get_registry(), "xlnet", path, overrides)


def test_the_graphs_masks_are_the_numpy_transcriptions() -> None:
    from ptmkit.objectives.plm import graph_attention_masks

    rng = np.random.default_rng(5)
    inputs, _, _ = permutation_batch(packed_batch(rng, 4, 20), rng, PermutationLMConfig(), SPECIALS)
    rank = inputs["permutation_rank"]
    assert rank.shape == (4, 20) and rank.dtype == np.int32
    for ours, reference in zip(graph_attention_masks(rank), attention_masks(rank), strict=True):
        np.testing.assert_array_equal(np.asarray(ours), reference)
