"""The int8 variant of a translation export (``ptmkit export RUN --int8 --dev PAIRS.tsv``): both
graphs dynamically quantized (:func:`ptmkit_export.quantize_int8`: int8 weights, activations
quantized at run time), then gated on translation quality.

Gate: greedy translations of every ``--dev`` source with fp32 and with int8 (the lean runtime's
:class:`ptmkit_export.Translator`), scored by sacrebleu's corpus BLEU against the references; int8 is
``ok`` when its BLEU is at least fp32's minus :data:`BLEU_MARGIN`. Its latency is reported, not
gated: milliseconds per sentence, greedy, one sentence a call, on the first :data:`LATENCY_SENTENCES`
dev sources, fp32 and int8 timed in alternation (:data:`LATENCY_ROUNDS` rounds, the median).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from ptmkit.api import ExportError, ParallelCorpus, atomic_write_json, read_parallel

#: int8 passes when its dev BLEU is at least fp32's minus this (BLEU points).
BLEU_MARGIN = 0.5
LATENCY_SENTENCES = 16
LATENCY_ROUNDS = 3
#: The fewest dev pairs the int8 gate scores: corpus BLEU over a handful of sentences is noise
#: (one sentence: 0 against 0, a pass).
MIN_GATE_PAIRS = 20
#: A variant's figures copied into the manifest's ``gate`` (and ``ptmkit export``'s summary).
GATE_KEYS = ("ok", "dev_bleu", "fp32_dev_bleu", "dev_sentences", "latency_ms_per_sentence_b1", "fp32_paired_latency_ms_per_sentence_b1")


def check_variant_options(options: dict[str, Any]) -> Path | None:
    """The ``--dev`` pairs file of an ``--int8`` export, or None without ``--int8``.

    Raises:
        ExportError: ``--int8`` without ``--dev``, or ``--dev`` without ``--int8``.
    """
    dev = options.get("dev")
    if options.get("int8") and dev is None:
        raise ExportError("--int8 on a translation export needs --dev PAIRS.tsv (source<TAB>reference lines: its BLEU gate)")
    if dev is not None and not options.get("int8"):
        raise ExportError("--dev on a translation export needs --int8 (the variant its pairs gate)")
    return Path(dev) if dev is not None else None


def _latencies(translators: dict[str, Any], sources: list[str]) -> dict[str, float]:
    """Median over rounds of the mean ms per sentence (greedy, batch 1), variants in alternation."""
    times: dict[str, list[float]] = {name: [] for name in translators}
    for _ in range(LATENCY_ROUNDS):
        for name, translator in translators.items():
            start = time.perf_counter()
            for source in sources:
                translator.translate([source])
            times[name].append(1000 * (time.perf_counter() - start) / len(sources))
    return {name: round(statistics.median(values), 3) for name, values in times.items()}


def read_gate_pairs(dev: Path, languages: str | None) -> ParallelCorpus:
    """The ``--dev`` pairs the int8 gate scores, read before anything is converted.

    Raises:
        DataError: an unreadable ``dev`` file.
        ExportError: a dev file of another language pair than the run's ``languages`` (its
            header), or of fewer than :data:`MIN_GATE_PAIRS` pairs.
    """
    pairs = read_parallel(dev)
    if languages and pairs.languages and "-".join(pairs.languages) != languages:
        raise ExportError(f"{dev}:1: a {'-'.join(pairs.languages)} file, but the run translates {languages}")
    if len(pairs) < MIN_GATE_PAIRS:
        raise ExportError(f"{dev}: {len(pairs)} sentence pair(s); the int8 gate's BLEU needs at least {MIN_GATE_PAIRS} (over fewer it is noise)")
    return pairs


def add_int8(tmp: Path, manifest: dict[str, Any], pairs: ParallelCorpus, console: Any) -> dict[str, Any]:
    """Quantize ``tmp``'s ``encoder.onnx`` and ``decoder.onnx`` to ``*.int8.onnx``, gate them on
    ``pairs`` (:func:`read_gate_pairs`; module docstring) and add the ``int8`` entry to
    ``manifest["variants"]`` and ``manifest["gate"]`` (``tmp/manifest.json`` is rewritten); returns the entry."""
    from ptmkit_export import Translator, quantize_int8
    from ptmkit_transformer.translate import score_translations

    with console.status("quantizing the encoder and the decoder to int8"):
        summary = {part: quantize_int8(tmp / f"{part}.onnx", tmp / f"{part}.int8.onnx") for part in ("encoder", "decoder")}
    manifest["variants"]["int8"] = {"file": "decoder.int8.onnx", "encoder": "encoder.int8.onnx"}  # not gated yet
    atomic_write_json(tmp / "manifest.json", manifest)
    translators = {name: Translator(tmp, variant=name, threads=1) for name in ("fp32", "int8")}
    with console.status(f"translating {len(pairs):,} dev sentences with fp32 and int8"):
        bleu = {name: score_translations(t.translate(pairs.sources), pairs.targets)["bleu"] for name, t in translators.items()}
        latency = _latencies(translators, pairs.sources[:LATENCY_SENTENCES])
    ok = bleu["int8"] >= bleu["fp32"] - BLEU_MARGIN
    entry = manifest["variants"]["int8"] | {
        "ok": ok,
        "problems": [] if ok else [f"dev BLEU {bleu['int8']:.2f} is more than {BLEU_MARGIN} below fp32's {bleu['fp32']:.2f}"],
        "dev_bleu": bleu["int8"], "fp32_dev_bleu": bleu["fp32"], "dev_sentences": len(pairs),
        "latency_ms_per_sentence_b1": latency["int8"], "fp32_paired_latency_ms_per_sentence_b1": latency["fp32"],
        "quantization": {part: {k: v for k, v in s.items() if isinstance(v, (str, int, float, bool))} for part, s in summary.items()},
    }
    manifest["variants"]["int8"] = entry
    manifest["gate"]["int8"] = {key: entry[key] for key in GATE_KEYS}
    atomic_write_json(tmp / "manifest.json", manifest)
    verdict = "ok" if ok else "not ok (" + "; ".join(entry["problems"]) + "): the runtime does not pick it by default"
    console.print(f"int8: dev BLEU {bleu['int8']:.2f} vs fp32 {bleu['fp32']:.2f} on {len(pairs):,} sentences, "
                  f"{latency['int8']:.2f} vs {latency['fp32']:.2f} ms/sentence (greedy, batch 1): {verdict}")
    return entry
