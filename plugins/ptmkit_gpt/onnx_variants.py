"""``ptmkit export GPT_RUN --optimize N --int8 --fp16 --dev PROMPTS``: the decoder export's
variants, each gated on greedy-token agreement with fp32 by :func:`gate_variant`:

- ``optimized`` (``model.opt.onnx``, :func:`build_optimized`): level 1, ptmkit's standard-ONNX
  passes; levels 2-3, each block's attention as one ONNX Runtime ``MultiHeadAttention`` node with
  the key/value cache as its inputs and outputs, then ONNX Runtime's transformer fusions
  (``SkipLayerNormalization``, ``FastGelu``), level 3 with its extended optimizations. With
  ``--int8`` too, the int8 variant is quantized from it when it passed its gate.
- ``int8`` (``model.int8.onnx``, :func:`build_int8`): dynamic int8
  (:func:`ptmkit_export.quantize.quantize_int8`: int8 weights of the ``MatMul``s, activations
  quantized at run time).
- ``fp16`` (``model.fp16.onnx``, :func:`build_fp16`): float16 weights and arithmetic
  (:func:`ptmkit_export.optimize.convert_fp16`), with float32 inputs and outputs, the key/value
  cache included: the lean runtime feeds every variant the same float32 cache, and the graph casts
  it at its edges. Meant for GPUs: ONNX Runtime's CPU has few fp16 kernels, so on CPU the gate
  usually marks it not ok for speed and the runtime's default never picks it there.

The gate decodes the first :data:`GATE_PROMPTS` lines of ``--dev`` (each cut to its last
:data:`PROMPT_TOKENS` tokens) greedily for :data:`GATE_NEW_TOKENS` tokens with both graphs, in
batches, through the key/value cache. ``greedy_token_agreement_with_fp32`` is the share of fp32's
generated tokens that the variant matches at the same position (a divergence usually changes the
rest of the row, so this is close to the mean agreeing prefix), ``identical_continuations`` the
share of prompts whose continuation is identical. Per-token latency at batch 1 (one thread) is
timed alternately with fp32. The variant is ``ok`` when agreement >= :data:`AGREEMENT_THRESHOLD`
(``agreement_ok``) and it is no more than 5% slower than fp32; either way its figures go in the
manifest, with the reasons it is not ok in ``problems``.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

AGREEMENT_THRESHOLD = 0.97
GATE_PROMPTS = 64
PROMPT_TOKENS = 32
GATE_NEW_TOKENS = 16
GATE_BATCH = 16
SLOWER_TOLERANCE = 1.05
TIMING_REPEATS = 5


def gate_prompts(generator: Any, dev: Path) -> list[list[int]]:
    """Token ids of the first :data:`GATE_PROMPTS` non-blank lines of ``dev``, each cut to its last
    :data:`PROMPT_TOKENS` tokens.

    Raises:
        DataError: a missing or non-UTF-8 file (naming the line), or one without a line.
    """
    from ptmkit.api import DataError
    from ptmkit_gpt.generate import read_prompt_file

    lines = read_prompt_file(dev)[:GATE_PROMPTS]
    if not lines:
        raise DataError(f"{dev}: no prompt for the variants' gate (one prompt a line)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # long lines are cut on purpose
        return [ids[-PROMPT_TOKENS:] for ids in generator.prompt_ids(lines, truncate="left")]


def _greedy(session: Any, spec: dict[str, int], prompts: list[list[int]], pad_id: int) -> list[list[int]]:
    from ptmkit_export.decoding import CachedDecoder
    from ptmkit_export.generation import GenerationSettings, generate_ids

    decoder = CachedDecoder(session, spec["layers"], spec["heads"], spec["head_dim"])
    settings = GenerationSettings(max_new_tokens=GATE_NEW_TOKENS)
    out: list[list[int]] = []
    for start in range(0, len(prompts), GATE_BATCH):
        decoder.reset()
        out += generate_ids(decoder.next_logits, prompts[start : start + GATE_BATCH], settings, pad_id, None)
    return out


def _paired_latency(sessions: list[Any], spec: dict[str, int], prompt: list[int], pad_id: int) -> list[float]:
    """Median milliseconds per generated token at batch 1 of each session, timed alternately."""
    times: list[list[float]] = [[] for _ in sessions]
    for _ in range(TIMING_REPEATS):
        for kept, session in zip(times, sessions, strict=True):
            start = time.perf_counter()
            _greedy(session, spec, [prompt], pad_id)
            kept.append((time.perf_counter() - start) * 1000 / GATE_NEW_TOKENS)
    return [float(np.median(kept)) for kept in times]


def build_int8(fp32: Path, path: Path, options: dict[str, Any]) -> dict[str, Any]:
    """Quantize ``fp32`` to ``path`` (dynamic int8; ``options``: ``per_channel``, ``reduce_range``,
    None: chosen from the CPU). Returns its build record, ``{"quantization": {...}}``."""
    from ptmkit_export.quantize import auto_reduce_range, quantize_int8

    reduce_range = options.get("reduce_range")
    if reduce_range is None:
        reduce_range, _ = auto_reduce_range()
    quantization = quantize_int8(fp32, path, per_channel=bool(options.get("per_channel", True)), reduce_range=bool(reduce_range))
    return {"quantization": quantization | {"mode": "dynamic"}}


def build_optimized(source: Path, path: Path, options: dict[str, Any]) -> dict[str, Any]:
    """Optimise ``source`` to ``path`` at ``options["optimize"]`` (1-3) with
    :func:`ptmkit_export.optimize.optimize_transformer`, ONNX Runtime's optimizer model type
    ``"gpt2"`` and ``options["num_heads"]`` / ``options["hidden_size"]``. At levels 2-3
    ``source`` is the graph with fused ``MultiHeadAttention`` nodes
    (:func:`ptmkit_gpt.onnx_graph.build_decoder_graph`), and ONNX Runtime's fusions add
    ``SkipLayerNormalization`` and ``FastGelu`` around them. Returns its build record,
    ``{"optimization": {...}}`` (what was fused, node counts before and after)."""
    from ptmkit_export.optimize import optimize_transformer

    level = int(options["optimize"])
    report = optimize_transformer(source, path, level, num_heads=options["num_heads"], hidden_size=options["hidden_size"], model_type="gpt2")
    return {"optimization": report}


def build_fp16(fp32: Path, path: Path, options: dict[str, Any]) -> dict[str, Any]:
    """Convert ``fp32`` to float16 at ``path``, keeping float32 inputs and outputs (the cache
    included). Returns its build record, ``{"conversion": {"casts", "io_dtype", "nodes_after"}}``."""
    from ptmkit_export.optimize import convert_fp16

    return {"conversion": convert_fp16(fp32, path) | {"io_dtype": "float32"}}


#: Each variant: its file and its builder ``(fp32 path, variant path, export options) -> build record``.
VARIANTS: dict[str, tuple[str, Callable[[Path, Path, dict[str, Any]], dict[str, Any]]]] = {
    "optimized": ("model.opt.onnx", build_optimized),
    "int8": ("model.int8.onnx", build_int8),
    "fp16": ("model.fp16.onnx", build_fp16),
}


def gate_variant(fp32: Path, path: Path, spec: dict[str, int], prompts: list[list[int]], pad_id: int, built: dict[str, Any]) -> dict[str, Any]:
    """Gate the variant at ``path`` against ``fp32`` (module docstring).

    Args:
        spec: the manifest's ``decoder`` (``layers``, ``heads``, ``head_dim``).
        prompts: token ids of the gate's prompts (:func:`gate_prompts`).
        pad_id: the padding id left-padded batches use.
        built: the variant's build record, copied into the entry.

    Returns:
        the manifest entry: ``file``, ``ok``, ``agreement_ok``, ``problems``,
        ``greedy_token_agreement_with_fp32``, ``identical_continuations``, ``gate_prompts``,
        ``gate_new_tokens``, ``latency_ms_per_token_b1``, ``fp32_paired_latency_ms_per_token_b1``
        (milliseconds per generated token, batch 1, one thread) and the build record's keys.
    """
    import onnxruntime as ort

    session_options = ort.SessionOptions()
    session_options.intra_op_num_threads = 1
    sessions = [ort.InferenceSession(str(p), session_options, providers=["CPUExecutionProvider"]) for p in (fp32, path)]
    reference, variant = (_greedy(session, spec, prompts, pad_id) for session in sessions)
    matched = sum(sum(a == b for a, b in zip(ref, got, strict=False)) for ref, got in zip(reference, variant, strict=True))
    agreement = matched / max(sum(len(ref) for ref in reference), 1)
    identical = float(np.mean([ref == got for ref, got in zip(reference, variant, strict=True)]))
    fp32_ms, variant_ms = _paired_latency(sessions, spec, prompts[0], pad_id)
    problems = []
    if agreement < AGREEMENT_THRESHOLD:
        problems.append(f"greedy-token agreement with fp32 {agreement:.4f} < {AGREEMENT_THRESHOLD}")
    if variant_ms > fp32_ms * SLOWER_TOLERANCE:
        problems.append(f"{variant_ms:.3f} ms per token at batch 1, slower than fp32's {fp32_ms:.3f}")
    return {
        "file": path.name, "ok": not problems, "agreement_ok": agreement >= AGREEMENT_THRESHOLD, "problems": problems,
        "greedy_token_agreement_with_fp32": agreement, "identical_continuations": identical,
        "gate_prompts": len(prompts), "gate_new_tokens": GATE_NEW_TOKENS,
        "latency_ms_per_token_b1": variant_ms, "fp32_paired_latency_ms_per_token_b1": fp32_ms, **built,
    }
