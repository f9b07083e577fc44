"""Text generation for decoder language models, written once for every backend: NumPy only.

A backend gives one function, ``next_logits(token_ids, padding_mask) -> (batch, vocabulary)``
float32, the logits of the token after each row's last position (a Keras backbone, an ONNX
session). The search loop here serves greedy decoding, sampling and beam search, in the spirit of
Hugging Face's ``generate`` (logits processors applied in order: temperature, top-k, top-p) and
keras-hub's ``Sampler`` classes.

- Batched prompts are **left-padded** (:func:`left_pad`), so that every row's next token sits at
  the last position; the backend derives position ids from the padding mask, and a row's tokens
  are those it gets alone.
- Each row stops at its end-of-text token or when ``stop(row, ids)`` says so, whatever the
  padding token is (a finished row is tracked, not recognised by its last token, so ``pad ==
  eos`` is safe); the loop ends when every row has stopped or after ``max_new_tokens``.
- Sampling draws each row from its own generator seeded by ``(seed, row)``: one seed gives one
  output, the same length every time.
- Beam search (:func:`beam_search`) ranks finished hypotheses by ``log P / length **
  length_penalty`` (Wu et al. 2016's length normalisation in the form Hugging Face uses,
  ``length`` counting the generated tokens, the end-of-text token included).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Sequence

import numpy as np

NextLogits = Callable[[np.ndarray, np.ndarray], np.ndarray]
StopCheck = Callable[[int, list[int]], bool]
STRATEGIES = ("greedy", "sample", "beam")
#: The most beams a search keeps. Each beam holds its own key/value cache, so memory grows with
#: beams x layers x length: Hugging Face's ``generate`` sets no limit, and one request for 10**9
#: beams ran this machine out of memory. Wider beams rarely help (Koehn and Knowles 2017: BLEU
#: falls beyond 5-10 beams).
MAX_BEAMS = 64


@dataclasses.dataclass(frozen=True)
class GenerationSettings:
    """How to decode.

    Attributes:
        max_new_tokens: the most tokens to add to each prompt (> 0).
        strategy: ``greedy`` (the most probable token), ``sample`` (drawn after temperature,
            top-k and top-p) or ``beam`` (beam search).
        temperature: logits are divided by it before sampling (>= 0); 0 means greedy.
        top_k: sample among the ``top_k`` most probable tokens (0: all).
        top_p: sample among the smallest set of most probable tokens whose probability reaches
            ``top_p`` (nucleus sampling, Holtzman et al. 2020), in (0, 1]; 1 keeps all.
        num_beams: beams of beam search (an integer from 1 to :data:`MAX_BEAMS`).
        length_penalty: the exponent of beam search's length normalisation (1: per-token mean).
        seed: the sampling seed.
    """

    max_new_tokens: int = 32
    strategy: str = "greedy"
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    num_beams: int = 4
    length_penalty: float = 1.0
    seed: int = 0

    def problems(self, name: Callable[[str], str] | None = None) -> list[str]:
        """What is wrong with these settings, one message per setting (empty when usable).

        Args:
            name: how a message names a setting, from its attribute name; the value follows it
                after a space (the command line passes :func:`cli_flag`, ``--max-new-tokens 0``;
                the server the request key, ``'parameters.max_new_tokens' 0``). Default: the
                Python keyword and its value, ``max_new_tokens=0``.
        """

        def shown(key: str, value: object) -> str:
            return f"{key}={value}" if name is None else f"{name(key)} {value}"

        found = []
        if self.max_new_tokens <= 0:
            found.append(f"{shown('max_new_tokens', self.max_new_tokens)}: must be at least 1")
        if self.strategy not in STRATEGIES:
            found.append(f"{shown('strategy', repr(self.strategy))}: expected one of {', '.join(STRATEGIES)}")
        if not 0 <= self.temperature < math.inf:
            found.append(f"{shown('temperature', self.temperature)}: must be a finite number >= 0 (0 is greedy)")
        if self.top_k < 0:
            found.append(f"{shown('top_k', self.top_k)}: must be >= 0 (0 keeps every token)")
        if not 0.0 < self.top_p <= 1.0:
            found.append(f"{shown('top_p', self.top_p)}: must be in (0, 1]")
        if problem := beams_problem(self.num_beams):
            found.append(f"{shown('num_beams', repr(self.num_beams))}: {problem}")
        if not math.isfinite(self.length_penalty):
            found.append(f"{shown('length_penalty', self.length_penalty)}: must be a finite number")
        return found


def cli_flag(key: str) -> str:
    """The command line's flag of a :class:`GenerationSettings` field: ``max_new_tokens`` -> ``--max-new-tokens``."""
    return "--" + key.replace("_", "-")


def beams_problem(num_beams: object) -> str | None:
    """What is wrong with ``num_beams`` as a beam count (not an integer, below 1, above
    :data:`MAX_BEAMS`), or None when it is usable."""
    if not isinstance(num_beams, int) or isinstance(num_beams, bool):
        return f"must be an integer from 1 to {MAX_BEAMS}"
    if not 1 <= num_beams <= MAX_BEAMS:
        return f"must be from 1 to {MAX_BEAMS}"
    return None


def left_pad(sequences: Sequence[Sequence[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """``(token_ids, padding_mask)``, ``(len(sequences), longest)`` int32, each row padded on the
    left with ``pad_id`` (mask 0) up to the longest."""
    longest = max(len(s) for s in sequences)
    token_ids = np.full((len(sequences), longest), pad_id, np.int32)
    mask = np.zeros((len(sequences), longest), np.int32)
    for row, sequence in enumerate(sequences):
        if sequence:
            token_ids[row, longest - len(sequence) :] = sequence
            mask[row, longest - len(sequence) :] = 1
    return token_ids, mask


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """``log_softmax`` over the last axis, in float64."""
    shifted = logits.astype(np.float64) - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def filter_logits(logits: np.ndarray, temperature: float, top_k: int, top_p: float) -> np.ndarray:
    """``(batch, vocabulary)`` log-probabilities after temperature, top-k and top-p (removed
    tokens at ``-inf``), in that order as Hugging Face's warpers apply them."""
    scores = log_softmax(logits / temperature)
    if 0 < top_k < scores.shape[-1]:
        kth = np.sort(scores, axis=-1)[:, -top_k][:, None]
        scores = np.where(scores < kth, -np.inf, scores)
    if top_p < 1.0:
        order = np.argsort(-scores, axis=-1, kind="stable")
        sorted_probs = np.exp(np.take_along_axis(scores, order, axis=-1))
        before = np.cumsum(sorted_probs, axis=-1) - sorted_probs  # mass of the tokens ranked above
        drop = np.zeros_like(scores, dtype=bool)
        np.put_along_axis(drop, order, before >= top_p, axis=-1)  # the most probable token always stays
        scores = np.where(drop, -np.inf, scores)
    return scores


def generate_ids(
    next_logits: NextLogits,
    prompts: Sequence[Sequence[int]],
    settings: GenerationSettings,
    pad_id: int,
    eos_id: int | None,
    max_length: int | None = None,
    stop: StopCheck | None = None,
) -> list[list[int]]:
    """The new tokens of each prompt (without the end-of-text token that ended it): every step of
    :func:`generate_steps`, joined.

    Args:
        next_logits: the backend (module docstring).
        prompts: token ids of each prompt, non-empty.
        settings: :class:`GenerationSettings`.
        pad_id: the id left padding holds.
        eos_id: the end-of-text id, or None (never stop early).
        max_length: the model's positions: generation stops when a row would pass them.
        stop: ``stop(row, new_ids)`` True ends that row (a stop string was generated).

    Raises:
        ValueError: unusable ``settings`` (:meth:`GenerationSettings.problems`), an empty prompt.
    """
    new: list[list[int]] = [[] for _ in prompts]
    for step in generate_steps(next_logits, prompts, settings, pad_id, eos_id, max_length, stop):
        for row, tokens in enumerate(step):
            new[row] += tokens
    return new


def generate_steps(
    next_logits: NextLogits,
    prompts: Sequence[Sequence[int]],
    settings: GenerationSettings,
    pad_id: int,
    eos_id: int | None,
    max_length: int | None = None,
    stop: StopCheck | None = None,
) -> Iterator[list[list[int]]]:
    """The search loop of :func:`generate_ids` (same arguments), one step at a time: after each
    call of ``next_logits``, yields per prompt the tokens that call added (``[]`` for a row that
    has stopped, or that stopped at this step on its end-of-text token). Beam search yields each
    prompt's best continuation once its search ends (the other rows ``[]``), as beams are only
    ranked at the end. Closing the iterator early stops the loop: no further ``next_logits`` call.

    The arguments are checked on the first ``next()``; :func:`generate_ids` checks them at once.

    Raises:
        ValueError: unusable ``settings`` (:meth:`GenerationSettings.problems`), an empty prompt.
    """
    problems = settings.problems()
    if problems:
        raise ValueError(problems[0])
    if any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token (start an empty one with the beginning-of-text token)")
    if settings.strategy == "beam":
        for row, prompt in enumerate(prompts):
            best = beam_search(next_logits, list(prompt), settings, eos_id, max_length, stop, row)
            yield [best if other == row else [] for other in range(len(prompts))]
        return
    greedy = settings.strategy == "greedy" or settings.temperature == 0
    rngs = [np.random.default_rng([settings.seed, row]) for row in range(len(prompts))]
    token_ids, mask = left_pad(prompts, pad_id)
    new: list[list[int]] = [[] for _ in prompts]
    done = np.zeros(len(prompts), bool)
    steps = settings.max_new_tokens if max_length is None else min(settings.max_new_tokens, max_length - token_ids.shape[1])
    for _ in range(max(steps, 0)):
        logits = np.asarray(next_logits(token_ids, mask), np.float32)
        if greedy:
            chosen = logits.argmax(axis=-1)
        else:
            probs = np.exp(filter_logits(logits, settings.temperature, settings.top_k, settings.top_p))
            chosen = np.array([rng.choice(len(p), p=p / p.sum()) for rng, p in zip(rngs, probs, strict=True)])
        alive = ~done
        added: list[list[int]] = [[] for _ in prompts]
        for row in np.flatnonzero(alive):
            token = int(chosen[row])
            if eos_id is not None and token == eos_id:
                done[row] = True
                continue
            new[row].append(token)
            added[row].append(token)
            if stop is not None and stop(int(row), new[row]):
                done[row] = True
        yield added
        token_ids = np.concatenate([token_ids, np.where(alive, chosen, pad_id).astype(np.int32)[:, None]], axis=1)
        mask = np.concatenate([mask, alive.astype(np.int32)[:, None]], axis=1)  # a finished row's filler is padding
        if done.all():
            break


def beam_search(
    next_logits: NextLogits,
    prompt: list[int],
    settings: GenerationSettings,
    eos_id: int | None,
    max_length: int | None = None,
    stop: StopCheck | None = None,
    row: int = 0,
) -> list[int]:
    """The best continuation of one prompt by beam search with length normalisation (module
    docstring); the beams run as one batch. ``row`` is the prompt's index for ``stop``."""
    beams = settings.num_beams
    alive: list[tuple[list[int], float]] = [([], 0.0)]
    finished: list[tuple[float, list[int]]] = []  # (normalised score, new tokens)

    def normalised(score: float, length: int) -> float:
        return score / max(length, 1) ** settings.length_penalty

    steps = settings.max_new_tokens if max_length is None else min(settings.max_new_tokens, max_length - len(prompt))
    for _ in range(max(steps, 0)):
        token_ids = np.asarray([prompt + tokens for tokens, _ in alive], np.int32)
        scores = log_softmax(np.asarray(next_logits(token_ids, np.ones_like(token_ids)), np.float32))
        totals = np.asarray([score for _, score in alive])[:, None] + scores
        order = np.argsort(-totals, axis=None, kind="stable")[: 2 * beams]
        survivors: list[tuple[list[int], float]] = []
        for flat in order:
            beam, token = divmod(int(flat), totals.shape[1])
            tokens, total = alive[beam][0], float(totals[beam, token])
            if eos_id is not None and token == eos_id:
                finished.append((normalised(total, len(tokens) + 1), tokens))
            elif stop is not None and stop(row, [*tokens, token]):
                finished.append((normalised(total, len(tokens) + 1), [*tokens, token]))
            else:
                survivors.append(([*tokens, token], total))
            if len(survivors) == beams:
                break
        alive = survivors
        finished = sorted(finished, key=lambda item: -item[0])[:beams]
        best_alive = max((normalised(score, len(tokens)) for tokens, score in alive), default=-np.inf)
        if not alive or (len(finished) == beams and finished[-1][0] >= best_alive):
            break
    pool = finished + [(normalised(score, len(tokens)), tokens) for tokens, score in alive]
    return max(pool, key=lambda item: item[0])[1] if pool else []
