"""``ptmkit export RUN --onnx --with-tokenizer``: single-file models that tokenize inside the graph.

The graph, its checks and the manifest entries are :mod:`ptmkit_export.tokenizer_graph`'s (no
TensorFlow there); this module feeds it the run's tokenizer.json and dev texts and records a batch
1 x 128 latency beside the two-step variants' (same threads, same repeats).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from ptmkit.contract import InputSpec

#: Dev texts the single-file check runs on, besides ptmkit_export's hard cases.
CHECK_TEXTS = 500


def dev_texts(dev_file: str | Path | None, labels: list[str]) -> list[str]:
    """Up to :data:`CHECK_TEXTS` texts of ``dev_file`` (labelled when ``labels``), or none without one."""
    if not dev_file:
        return []
    if labels:
        from ptmkit.training.finetune import load_labelled

        texts, _, _ = load_labelled(dev_file, labels)
    else:
        from ptmkit.data.readers import read_records

        texts = [record.text for record in read_records(dev_file, labelled=False)]
    return [str(text) for text in texts[:CHECK_TEXTS]]


def tokenizer_variants(
    directory: Path,
    variants: dict[str, Any],
    tokenizer_json: Path,
    input_specs: Sequence[InputSpec],
    output: str,
    sequence_length: int,
    pad_id: int,
    check_texts: list[str],
    latency_threads: int,
    latency_repeats: int,
    console: Console,
) -> dict[str, dict[str, Any]]:
    """Build, check and time the single-file variants (``fp32+tokenizer``, ``int8+tokenizer``).

    Returns:
        their manifest entries (see :func:`ptmkit_export.tokenizer_graph.build_tokenizer_variants`),
        each with ``latency_ms_b1x128``: one text of ``min(128, sequence_length)`` tokens,
        tokenized in the graph, median of ``latency_repeats`` calls.

    Raises:
        ExportError: the tokenizer cannot go into the graph, a check failed, or
            onnxruntime-extensions is not installed; no single-file model is written.
    """
    from ptmkit.data.tokenization import manifest_inputs
    from ptmkit.errors import ExportError
    from ptmkit_export.errors import ExportDirError
    from ptmkit_export.tokenizer_graph import TokenizerGraphError, build_tokenizer_variants_isolated

    inputs = [{key: spec[key] for key in ("name", "dtype", "encoding")} for spec in manifest_inputs(input_specs)]
    try:
        with console.status("building the tokenizer graph (onnxruntime-extensions) and checking it against tokenizers"):
            # In a fresh process: onnxruntime-extensions' regular expressions misbehave next to TensorFlow.
            made = build_tokenizer_variants_isolated(
                latency_threads, latency_repeats, directory=directory, variants=variants, tokenizer_json=tokenizer_json,
                inputs=inputs, output_name=output, max_sequence_length=sequence_length, pad_token_id=pad_id, check_texts=check_texts,
            )
    except (TokenizerGraphError, ExportDirError) as error:
        raise ExportError(str(error)) from error
    for name, entry in made.items():
        check = entry["check"]
        console.print(
            f"{name}: {entry['file']}, token ids identical to tokenizers on {check['texts']} texts, max abs difference to the "
            f"two-step {entry['base']} {check['max_abs_diff_vs_two_step']:.1e}, {entry['latency_ms_b1x128']:.2f} ms at batch 1 x 128 "
            f"against {entry['two_step_latency_ms_b1x128']:.2f} ms for tokenizers + {entry['base']} (same process, tokenization included)"
        )
    return made
