"""``ptmkit probe``: the same small classifier on the frozen features of any run.

A linear probe (Alain & Bengio 2016; SentEval's logistic regression, Conneau & Kiela 2018) measures
what a pre-trained model's features hold, with nothing of the model trained: the family gives a
fixed-size vector per text (:class:`~ptmkit.contract.ProvidesSentenceFeatures`: averaged word
vectors, mean-pooled hidden states, ELMo's averaged layers), the features are standardised with the
training set's mean and standard deviation, and a multinomial logistic regression with an L2
penalty is fitted by L-BFGS (:class:`LogisticRegression`, scikit-learn's ``LogisticRegression(C,
solver="lbfgs")`` objective, written in NumPy: scikit-learn is not a dependency of ptmkit). Dev and
test accuracy of every family, measured the same way, make one table (``benchmarks/lineage.py``).

Nothing is written into the run directory.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

#: The L2 penalty's inverse strength (scikit-learn's ``C``; its default).
DEFAULT_C = 1.0
#: L-BFGS iterations at most.
DEFAULT_MAX_ITER = 1000
#: Texts featurised per call (progress is printed between chunks).
CHUNK = 2048


class LogisticRegression:
    """Multinomial logistic regression with an L2 penalty on the weights (not the intercepts).

    Minimises ``mean_i CE(softmax(x_i W + b), y_i) + ||W||^2 / (2 C n)``: scikit-learn's
    ``LogisticRegression(C=C)`` objective (``sum_i CE + ||W||^2 / (2C)``) divided by ``n``, so the
    same minimiser (with two classes, scikit-learn's binary model: the penalty is doubled so that
    the difference of the two rows is penalised as its one weight vector is). L-BFGS (Nocedal 1980; memory 10) with a backtracking Armijo line search, in
    float64; it stops when the largest gradient entry is below ``tol`` or the objective's relative
    decrease is below ``64 * eps`` (scipy's ``ftol`` as scikit-learn sets it).

    Args:
        C: float > 0. Inverse penalty strength.
        max_iter: int. L-BFGS iterations at most.
        tol: float. Gradient tolerance (max-norm).

    Attributes (after :meth:`fit`):
        coef_: ``(classes, dim)`` float64. intercept_: ``(classes,)`` float64.
        n_iter_: iterations run. converged_: whether a stopping test (not ``max_iter``) ended it.
    """

    def __init__(self, C: float = DEFAULT_C, max_iter: int = DEFAULT_MAX_ITER, tol: float = 1e-8) -> None:
        if not C > 0:
            raise ValueError(f"C must be > 0, got {C}")
        self.C, self.max_iter, self.tol = float(C), int(max_iter), float(tol)

    def fit(self, x: np.ndarray, y: np.ndarray, classes: int | None = None) -> LogisticRegression:
        """Fit on ``x`` ``(n, dim)`` float and ``y`` ``(n,)`` int class ids in ``[0, classes)``."""
        x = np.asarray(x, np.float64)
        y = np.asarray(y, np.int64)
        n, dim = x.shape
        k = int(classes if classes is not None else y.max() + 1)
        onehot = np.zeros((n, k))
        onehot[np.arange(n), y] = 1.0
        # two classes: scikit-learn fits one weight vector d (sigmoid), penalty ||d||^2 / 2C; the
        # softmax's two rows at the optimum are -d/2 and d/2, whose penalty is half that: double it
        alpha = (2.0 if k == 2 else 1.0) / (self.C * n)

        def objective(params: np.ndarray) -> tuple[float, np.ndarray]:
            weights, bias = params[: dim * k].reshape(dim, k), params[dim * k :]
            logits = x @ weights + bias
            logits -= logits.max(axis=1, keepdims=True)
            log_norm = np.log(np.exp(logits).sum(axis=1, keepdims=True))
            log_p = logits - log_norm
            loss = -float(np.sum(onehot * log_p)) / n + 0.5 * alpha * float(np.sum(weights * weights))
            residual = (np.exp(log_p) - onehot) / n
            grad = np.concatenate([(x.T @ residual + alpha * weights).ravel(), residual.sum(axis=0)])
            return loss, grad

        with small_blas(n * dim * k):
            params, self.n_iter_, self.converged_ = lbfgs(objective, np.zeros(dim * k + k), self.max_iter, self.tol)
        self.coef_ = params[: dim * k].reshape(dim, k).T.copy()
        self.intercept_ = params[dim * k :].copy()
        return self

    def decision_function(self, x: np.ndarray) -> np.ndarray:
        """``(n, classes)`` float64 logits."""
        return np.asarray(x, np.float64) @ self.coef_.T + self.intercept_

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        """``(n, classes)`` float64 softmax probabilities."""
        logits = self.decision_function(x)
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        return p / p.sum(axis=1, keepdims=True)

    def predict(self, x: np.ndarray) -> np.ndarray:
        """``(n,)`` int64 class ids (the first of tied maxima, as ``np.argmax``)."""
        return np.argmax(self.decision_function(x), axis=1)


#: Below this many multiply-adds per product (examples x features x classes), the fit runs BLAS on one thread.
SMALL_PRODUCT = 1e8


def small_blas(size: float) -> contextlib.AbstractContextManager[Any]:
    """One BLAS thread for products smaller than :data:`SMALL_PRODUCT` (through ``threadpoolctl``
    when it is installed; scikit-learn brings it): OpenBLAS's threads on small matrices ran a fit
    12x slower on a busy two-core machine (2,000 x 32 x 43: 15 s against 1.3 s)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(1, user_api="blas") if size < SMALL_PRODUCT else contextlib.nullcontext()


def lbfgs(
    fun: Callable[[np.ndarray], tuple[float, np.ndarray]], x0: np.ndarray, max_iter: int, tol: float, memory: int = 10
) -> tuple[np.ndarray, int, bool]:
    """Minimise a smooth convex ``fun`` (returning ``(value, gradient)``) from ``x0`` by L-BFGS.

    Returns:
        ``(x, iterations, converged)``.
    """
    x = np.asarray(x0, np.float64).copy()
    f, g = fun(x)
    steps: list[tuple[np.ndarray, np.ndarray, float]] = []
    for iteration in range(max_iter):
        if np.max(np.abs(g)) <= tol:
            return x, iteration, True
        direction = -g
        alphas = []
        for s, y, rho in reversed(steps):  # the two-loop recursion: direction = -H g
            a = rho * float(s @ direction)
            alphas.append(a)
            direction = direction - a * y
        if steps:
            s, y, _ = steps[-1]
            direction *= float(s @ y) / float(y @ y)
        else:
            direction /= max(1.0, float(np.linalg.norm(g)))
        for (s, y, rho), a in zip(steps, reversed(alphas), strict=True):
            direction = direction + s * (a - rho * float(y @ direction))
        slope = float(g @ direction)
        if slope >= 0:  # not a descent direction (rounding): restart from the gradient
            steps.clear()
            direction, slope = -g, -float(g @ g)
        t = 1.0
        for _ in range(60):
            f_new, g_new = fun(x + t * direction)
            if f_new <= f + 1e-4 * t * slope:
                break
            t *= 0.5
        else:
            return x, iteration, True  # no decrease along a descent direction: at the optimum to rounding
        s, y = t * direction, g_new - g
        x, f_old, f, g = x + s, f, f_new, g_new
        if float(s @ y) > 1e-12:
            steps.append((s, y, 1.0 / float(s @ y)))
            del steps[:-memory]
        if (f_old - f) / max(abs(f_old), abs(f), 1.0) <= 64 * np.finfo(float).eps:
            return x, iteration + 1, True
    return x, max_iter, bool(np.max(np.abs(g)) <= tol)


def standardize(train: np.ndarray, *others: np.ndarray) -> list[np.ndarray]:
    """``train`` and ``others`` minus the training mean, divided by the training standard deviation
    (``ddof=0``; a constant feature: divided by 1), as scikit-learn's ``StandardScaler``; float64."""
    train = np.asarray(train, np.float64)
    mean, scale = train.mean(axis=0), train.std(axis=0)
    scale[scale == 0] = 1.0
    return [(np.asarray(a, np.float64) - mean) / scale for a in (train, *others)]


def features_of(run_dir: str | Path) -> tuple[Any, dict[str, Any]]:
    """The :class:`~ptmkit.contract.SentenceFeatures` of a finished run, and its manifest.

    Raises:
        RunDirError: not a run (no manifest), a fine-tuned run, or a run whose family gives no
            sentence features (a text classifier); one line naming the directory.
    """
    from ptmkit.contract import ProvidesSentenceFeatures
    from ptmkit.errors import RunDirError
    from ptmkit.plugins import get_registry
    from ptmkit.rundir import RunDir

    run = RunDir(run_dir)
    if not (Path(run_dir) / "manifest.json").is_file():
        raise RunDirError(
            f"{run_dir}: not a finished run directory (no manifest.json); probe a pre-trained or imported run"
        )
    manifest = run.read_json("manifest.json")
    if not isinstance(manifest, dict) or "family" not in manifest or "stage" not in manifest:
        raise RunDirError(
            f"{run_dir}: not a run directory (its manifest.json has no 'family' and 'stage': an export directory?); "
            "probe the pre-trained or imported run"
        )
    if manifest["stage"] == "finetune":
        raise RunDirError(
            f"{run_dir}: is a fine-tuned run; probe the pre-trained run it comes from ({manifest.get('parent', '?')})"
        )
    family = get_registry().family(manifest["family"])
    if not isinstance(family, ProvidesSentenceFeatures):
        raise RunDirError(
            f"{run_dir}: a {family.name} run has no sentence features to probe (its family does not provide them); probe a pre-trained or imported run"
        )
    return family.sentence_features(Path(run_dir)), manifest


def featurize(features: Any, texts: list[str], what: str, console: Any = None) -> np.ndarray:
    """``features.featurize`` over ``texts`` in chunks of :data:`CHUNK`, checked.

    Raises:
        PtmkitError: a feature matrix of the wrong shape, or holding nan or infinity.
    """
    from ptmkit.errors import PtmkitError

    chunks = []
    for start in range(0, len(texts), CHUNK):
        chunks.append(np.asarray(features.featurize(texts[start : start + CHUNK]), np.float32))
        if console is not None and len(texts) > CHUNK:
            console.print(
                f"  {what}: {min(start + CHUNK, len(texts)):,} / {len(texts):,} texts", markup=False, highlight=False
            )
    matrix = np.concatenate(chunks) if chunks else np.zeros((0, features.dim), np.float32)
    if matrix.shape != (len(texts), features.dim):
        raise PtmkitError(f"{what}: features of shape {matrix.shape}, expected ({len(texts)}, {features.dim})")
    if not np.all(np.isfinite(matrix)):
        raise PtmkitError(f"{what}: the features hold nan or infinity (a diverged run?)")
    return matrix


def probe(
    run_dir: str | Path,
    task: str | Path,
    dev: str | Path,
    test: str | Path | None = None,
    c: float = DEFAULT_C,
    max_iter: int = DEFAULT_MAX_ITER,
    console: Any = None,
) -> dict[str, Any]:
    """Fit the probe on ``task``'s features from ``run_dir``; measure dev (and test) accuracy.

    Labelled files are read as ``ptmkit finetune`` reads them (``.tsv`` with ``label`` and ``text``
    columns, fastText's ``__label__`` lines, ...); a dev or test label the training file lacks is
    refused. The files are read before the run is loaded, so a bad line fails fast.

    Returns:
        JSON-serialisable: ``run``, ``family``, ``feature_kind``, ``feature_dim``, ``train``,
        ``dev`` and ``test`` (counts), ``labels``, ``dev_accuracy``, ``test_accuracy`` (None
        without ``test``), ``C``, ``iterations``, ``converged``, ``features_seconds``,
        ``fit_seconds``.

    Raises:
        DataError: an unreadable task file or line (naming ``file:line``), fewer than two labels.
        RunDirError: a run without sentence features (:func:`features_of`).
    """
    from ptmkit.training.finetune import load_labelled

    train_texts, labels, train_y = load_labelled(task)
    splits = {"dev": load_labelled(dev, labels)}
    if test is not None:
        splits["test"] = load_labelled(test, labels)
    features, manifest = features_of(run_dir)
    started = time.perf_counter()
    paths = {"dev": dev, "test": test}
    train_x = featurize(features, train_texts, str(task), console)
    others = {name: featurize(features, split[0], str(paths[name]), console) for name, split in splits.items()}
    features_seconds = time.perf_counter() - started
    train_x, *scaled = standardize(train_x, *others.values())
    started = time.perf_counter()
    model = LogisticRegression(c, max_iter).fit(train_x, train_y, len(labels))
    fit_seconds = time.perf_counter() - started
    accuracy = {
        name: float(np.mean(model.predict(x) == splits[name][2])) for name, x in zip(others, scaled, strict=True)
    }
    return {
        "run": str(run_dir),
        "family": manifest["family"],
        "feature_kind": features.kind,
        "feature_dim": int(features.dim),
        "train": len(train_texts),
        "dev": len(splits["dev"][0]),
        "test": len(splits["test"][0]) if "test" in splits else None,
        "labels": len(labels),
        "train_accuracy": float(np.mean(model.predict(train_x) == train_y)),
        "dev_accuracy": accuracy["dev"],
        "test_accuracy": accuracy.get("test"),
        "C": float(c),
        "iterations": int(model.n_iter_),
        "converged": bool(model.converged_),
        "features_seconds": round(features_seconds, 2),
        "fit_seconds": round(fit_seconds, 2),
    }
