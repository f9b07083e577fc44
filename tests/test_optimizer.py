"""The fine-tuning optimiser against the reference algorithms it claims to implement.

References: ``torch.optim.AdamW`` as its documentation states the algorithm (Loshchilov & Hutter
2019, with PyTorch's epsilon placement and bias correction), written out in NumPy below, and the
linear warm-up/decay schedule of BERT's ``optimization.py`` / Hugging Face's
``get_linear_schedule_with_warmup``.
"""

from __future__ import annotations

import numpy as np
import pytest

LR, WD, EPS, BETA_1, BETA_2 = 1e-3, 0.01, 1e-6, 0.9, 0.999


def torch_adamw(params: dict[str, np.ndarray], grads: list[dict[str, np.ndarray]], decay: set[str], clip: float) -> dict[str, np.ndarray]:
    """torch.optim.AdamW after ``clip_grad_norm_(clip)``, in float64."""
    p = {k: v.astype(np.float64) for k, v in params.items()}
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v2 = {k: np.zeros_like(v) for k, v in p.items()}
    for t, step_grads in enumerate(grads, start=1):
        norm = np.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in step_grads.values()))
        scale = min(1.0, clip / (norm + 1e-6))
        for k in p:
            g = step_grads[k].astype(np.float64) * scale
            if k in decay:
                p[k] = p[k] * (1 - LR * WD)
            m[k] = BETA_1 * m[k] + (1 - BETA_1) * g
            v2[k] = BETA_2 * v2[k] + (1 - BETA_2) * g * g
            m_hat, v_hat = m[k] / (1 - BETA_1**t), v2[k] / (1 - BETA_2**t)
            p[k] = p[k] - LR * m_hat / (np.sqrt(v_hat) + EPS)
    return p


def run_keras(optimizer: object, params: dict[str, np.ndarray], grads: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    import keras

    variables = {k: keras.Variable(v, name=k) for k, v in params.items()}
    for step_grads in grads:
        optimizer.apply_gradients([(keras.ops.convert_to_tensor(step_grads[k]), variables[k]) for k in params])  # type: ignore[attr-defined]
    return {k: keras.ops.convert_to_numpy(v) for k, v in variables.items()}


@pytest.fixture(scope="module")
def problem() -> tuple[dict[str, np.ndarray], list[dict[str, np.ndarray]]]:
    rng = np.random.default_rng(0)
    params = {"kernel": rng.normal(size=(4, 3)).astype(np.float32), "bias": rng.normal(size=3).astype(np.float32)}
    # Gradients from 1e-8 (where epsilon's placement matters) to 10 (where clipping does).
    scales = [1e-8, 1e-6, 1e-3, 10.0, 1e-2, 1e-7]
    grads = [{k: (s * rng.normal(size=v.shape)).astype(np.float32) for k, v in params.items()} for s in scales]
    return params, grads


def test_adamw_matches_torch_algorithm(problem: tuple[dict[str, np.ndarray], list[dict[str, np.ndarray]]]) -> None:
    from ptmkit.training.schedule import AdamW

    params, grads = problem
    optimizer = AdamW(learning_rate=LR, weight_decay=WD, epsilon=EPS, global_clipnorm=1.0)
    optimizer.exclude_from_weight_decay(var_names=["bias"])
    ours = run_keras(optimizer, params, grads)
    reference = torch_adamw(params, grads, decay={"kernel"}, clip=1.0)
    for name in params:
        moved = np.abs(reference[name] - params[name]).max()
        assert moved > 1e-3  # the steps are not negligible
        np.testing.assert_allclose(ours[name], reference[name], rtol=0, atol=1e-6)  # float32 rounding of values near 1


def test_keras_adamw_differs_from_torch_where_epsilon_matters(problem: tuple[dict[str, np.ndarray], list[dict[str, np.ndarray]]]) -> None:
    """Why ptmkit has its own AdamW: Keras adds epsilon before bias correction."""
    import keras

    params, grads = problem
    optimizer = keras.optimizers.AdamW(learning_rate=LR, weight_decay=WD, epsilon=EPS, global_clipnorm=1.0)
    optimizer.exclude_from_weight_decay(var_names=["bias"])
    stock = run_keras(optimizer, params, grads)
    reference = torch_adamw(params, grads, decay={"kernel"}, clip=1.0)
    assert np.abs(stock["kernel"] - reference["kernel"]).max() > 1e-4


def test_warmup_linear_decay_matches_bert_schedule() -> None:
    import keras

    from ptmkit.training.schedule import WarmupLinearDecay

    peak, warmup, total = 5e-5, 125, 1250
    schedule = WarmupLinearDecay(peak, warmup, total)
    for step in (0, 1, 62, 124, 125, 126, 700, 1249, 1250, 1300):
        expected = peak * step / warmup if step < warmup else peak * max(0.0, (total - step) / (total - warmup))
        assert float(keras.ops.convert_to_numpy(schedule(step))) == pytest.approx(expected, rel=1e-6, abs=1e-12)


def test_adamw_sums_repeated_embedding_rows_before_squaring() -> None:
    """An embedding row looked up k times in a batch gets one gradient, the sum of the k slices
    (as PyTorch's dense embedding gradient): Adam's second moment sees (sum g_i)^2, not sum g_i^2."""
    import keras
    import tensorflow as tf

    from ptmkit.training.schedule import AdamW

    table = (np.arange(15, dtype=np.float32).reshape(5, 3) / 10).copy()
    ids = np.array([1, 1, 1, 2, 1])
    weights = np.array([[1, 2, 3], [1, -2, 0.5], [0.5, 1, 1], [1, 1, 1], [-1, 0, 2]], np.float32)
    dense = np.zeros_like(table)
    np.add.at(dense, ids, weights)  # d(sum(table[ids] * weights)) / d table
    reference = torch_adamw({"embeddings": table}, [{"embeddings": dense}] * 3, decay=set(), clip=np.inf)

    def train(optimizer: keras.optimizers.Optimizer) -> np.ndarray:
        embedding = keras.layers.Embedding(5, 3)
        embedding.build((None,))
        embedding.embeddings.assign(table)
        for _ in range(3):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(embedding(ids) * weights)
            grads = tape.gradient(loss, embedding.trainable_variables)
            assert isinstance(grads[0], tf.IndexedSlices)
            optimizer.apply_gradients(zip(grads, embedding.trainable_variables, strict=True))
        return keras.ops.convert_to_numpy(embedding.embeddings)

    np.testing.assert_allclose(train(AdamW(learning_rate=LR, weight_decay=0.0, epsilon=EPS)), reference["embeddings"], rtol=0, atol=1e-6)
    stock = train(keras.optimizers.Adam(learning_rate=LR, epsilon=EPS))
    assert np.abs(stock[1] - reference["embeddings"][1]).max() > 1e-4  # Keras' own Adam squares each slice
