"""Stage 4 of ``ptmkit export``, gate: every variant against fp32.

Top-1 agreement on the dev set (heads) or mean cosine on the dev texts (embeddings), median
latency at batch 1 x 128 and throughput at batch 32 x 128 (one ONNX Runtime thread: the numbers
are comparable between variants, not the machine's best). A variant that agrees on fewer than 97%
of dev examples (mean cosine below 0.99), or is more than 5% slower than fp32 at batch 1 x 128
(the two timed alternately), is printed in red and stored with ``ok: false`` and its ``problems``;
:class:`ptmkit_export.Predictor` never picks it by default and warns when asked for it. The table
is printed and stored in the manifest (``gate``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from ptmkit.exporting.convert import release_memory
from ptmkit.exporting.parity import cosine, length_batches, random_inputs, run_batches
from ptmkit.exporting.source import ExportSource

AGREEMENT_THRESHOLD = 0.97  # top-1, heads
COSINE_THRESHOLD = 0.99  # mean cosine to fp32, embeddings
DEV_EMBEDDING_TEXTS = 1000  # texts of --dev used for the embedding check
LATENCY_SHAPE = (1, 128)
LATENCY_THREADS = 1  # timings on a shared 2-core machine swing 3x with 2 threads; 1 is repeatable
LATENCY_REPEATS = 50
#: A variant is "slower than fp32" when its median latency is over this multiple of fp32's (measured
#: alternately with it): medians of the same graph measured twice differ by a few percent here.
SLOWER_TOLERANCE = 1.05
THROUGHPUT_SHAPE = (32, 128)
THROUGHPUT_REPEATS = 3


def open_session(path: Path) -> Any:
    """An ONNX Runtime CPU session of ``path`` on :data:`LATENCY_THREADS` threads."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = LATENCY_THREADS
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


class Gate:
    """The fp32 session and what every variant is compared and timed on.

    Args:
        session: the fp32 model's session (:func:`open_session`).
        source: the run (:class:`ptmkit.exporting.source.ExportSource`).
        console: where warnings go.

    The timing feeds are random full rows (:func:`ptmkit.exporting.parity.random_inputs`) of
    ``min(128, max_sequence_length)`` tokens, at batch 1 and batch 32.
    """

    def __init__(self, session: Any, source: ExportSource, console: Console) -> None:
        self.session, self.source, self.console = session, source, console
        length = min(LATENCY_SHAPE[1], source.limits.max_sequence_length or LATENCY_SHAPE[1])
        self.latency_feeds, self.throughput_feeds = (
            random_inputs(np.random.default_rng(seed), source.family.inputs, rows, length, source.vocabulary_size, source.padding_id, source.characters, full=True)
            for seed, rows in ((1, LATENCY_SHAPE[0]), (2, THROUGHPUT_SHAPE[0]))
        )
        self.shapes = {"latency": f"1x{length}", "throughput": f"{THROUGHPUT_SHAPE[0]}x{length}"}
        self.dev_batches: list[dict[str, np.ndarray]] = []
        self.fp32_out: np.ndarray | None = None
        self.dev_labels: np.ndarray | None = None
        self.dev_count = 0

    @contextlib.contextmanager
    def set_aside(self, path: Path) -> Iterator[None]:
        """Close the fp32 session (the fp32 model at ``path``) within the block, and open it again
        after: a variant is built without it in memory (all-MiniLM-L6-v2's weights, prepacked,
        about 100 MB, at the peak of static int8's calibration and of ONNX Runtime's optimizer)."""
        self.session = None
        release_memory()
        try:
            yield
        finally:
            release_memory()  # what building the variant freed, before fp32 is loaded again
            self.session = open_session(path)

    def fp32_entry(self, path: Path, parity: dict[str, float]) -> dict[str, Any]:
        """fp32's manifest entry: its parity differences, its timings and its size."""
        return {"file": path.name, "ok": True, "problems": [], "parity_max_abs_diff": parity, "latency_threads": LATENCY_THREADS,
                **self.timings(self.session), "bytes": path.stat().st_size}

    def timings(self, session: Any) -> dict[str, float]:
        """Median latency (ms) at batch 1 and throughput (sequences/s) at batch 32 of ``session``."""
        from ptmkit_export.benchmark import median_latency_ms

        latency = median_latency_ms(session, self.latency_feeds, repeats=LATENCY_REPEATS)
        batch_ms = median_latency_ms(session, self.throughput_feeds, warmup=1, repeats=THROUGHPUT_REPEATS)
        self.release_arena(session)
        return {"latency_ms_b1x128": round(latency, 3), "throughput_seq_per_s_b32x128": round(THROUGHPUT_SHAPE[0] * 1000.0 / batch_ms, 1)}

    def paired_timings(self, session: Any) -> dict[str, float]:
        """The variant's timings and fp32's, measured alternately (one call of each in turn) so a
        shared machine's load swings hit both alike."""
        (fp32_latency, latency) = paired_median_ms([self.session, session], self.latency_feeds, LATENCY_REPEATS)
        (fp32_batch, batch_ms) = paired_median_ms([self.session, session], self.throughput_feeds, THROUGHPUT_REPEATS, warmup=1)
        self.release_arena(self.session)
        return {
            "latency_ms_b1x128": round(latency, 3),
            "throughput_seq_per_s_b32x128": round(THROUGHPUT_SHAPE[0] * 1000.0 / batch_ms, 1),
            "fp32_paired_latency_ms_b1x128": round(fp32_latency, 3),
            "fp32_paired_throughput_seq_per_s_b32x128": round(THROUGHPUT_SHAPE[0] * 1000.0 / fp32_batch, 1),
        }

    def release_arena(self, session: Any) -> None:
        """Hand back what ONNX Runtime's CPU arena kept from the batch-32 timings (about 200 MB
        for all-MiniLM-L6-v2, kept for the session's life otherwise): one batch-1 call that shrinks
        the arena when it ends (:func:`ptmkit.exporting.parity.run_batches`)."""
        run_batches(session, [self.latency_feeds], self.source.output)

    def load_dev(self) -> dict[str, Any]:
        """Read the dev set (labelled for a head; the first :data:`DEV_EMBEDDING_TEXTS` texts for
        embeddings), run fp32 on it; returns fp32's ``dev_accuracy`` (a head) or nothing.

        Raises:
            DataError: an unreadable dev file.
        """
        from ptmkit.data.tokenization import encode_texts

        source = self.source
        assert source.dev_file is not None
        if source.labels:
            from ptmkit.training.finetune import load_labelled

            texts, _, self.dev_labels = load_labelled(source.dev_file, source.labels)
        else:
            from ptmkit.data.readers import read_records

            texts = [record.text for record in read_records(source.dev_file, labelled=False)][:DEV_EMBEDDING_TEXTS]
        self.dev_count = len(texts)
        feeds = encode_texts(source.tokenizer, texts, source.sequence_length, source.family.inputs, source.padding_id)
        self.dev_batches = length_batches(feeds, source.mask_input)
        self.fp32_out = run_batches(self.session, self.dev_batches, source.output)
        if source.labels:
            return {"dev_accuracy": round(float(np.mean(np.argmax(self.fp32_out, -1) == self.dev_labels)), 4)}
        return {}

    def check(self, name: str, path: Path, extra: dict[str, Any]) -> dict[str, Any]:
        """Gate variant ``name`` (file ``path``; ``extra``: how it was built) against fp32 on the
        dev set (:meth:`load_dev` first) and in paired timings; print a warning when it fails.

        Returns:
            its manifest entry: ``ok``, ``problems``, the agreement, the timings, ``bytes``.
        """
        release_memory()  # what building the variant freed (ONNX Runtime's optimizer, the quantizer)
        assert self.fp32_out is not None
        source, dev_file = self.source, self.source.dev_file
        session = open_session(path)
        out = run_batches(session, self.dev_batches, source.output)
        entry: dict[str, Any] = {"file": path.name, **extra, "dev_file": str(dev_file), "latency_threads": LATENCY_THREADS}
        if source.labels:
            top = np.argmax(out, -1)
            agreement, threshold, measure = float(np.mean(np.argmax(self.fp32_out, -1) == top)), AGREEMENT_THRESHOLD, "top-1 agreement"
            entry["dev_agreement_with_fp32"] = round(agreement, 4)
            entry["dev_accuracy"] = round(float(np.mean(top == self.dev_labels)), 4)
        else:
            cosines = cosine(self.fp32_out, out)
            agreement, threshold, measure = float(np.mean(cosines)), COSINE_THRESHOLD, "mean cosine"
            entry["dev_mean_cosine_to_fp32"] = round(agreement, 5)
            entry["dev_min_cosine_to_fp32"] = round(float(np.min(cosines)), 5)
            entry["dev_texts"] = self.dev_count
        entry.update(self.paired_timings(session))
        problems = []
        if agreement < threshold:
            problems.append(f"{measure} with fp32 is only {agreement:.4f} on {dev_file} (< {threshold})")
        if entry["latency_ms_b1x128"] > entry["fp32_paired_latency_ms_b1x128"] * SLOWER_TOLERANCE:
            problems.append(f"slower than fp32 ({entry['latency_ms_b1x128']:.2f} ms vs {entry['fp32_paired_latency_ms_b1x128']:.2f} ms at batch {self.shapes['latency']}, measured alternately)")
        entry |= {"ok": not problems, "agreement_ok": agreement >= threshold, "problems": problems, "bytes": path.stat().st_size}
        if problems:
            hint = " (fp16 is meant for GPUs; ONNX Runtime's CPU has few fp16 kernels)" if name == "fp16" else ""
            self.console.print(f"[bold red]WARNING: {name}: {'; '.join(problems)}{hint}; marked not ok: the runtime does not pick it by default[/bold red]")
        return entry

    def table(self, variants: dict[str, Any]) -> dict[str, Any]:
        """The manifest's ``gate``: the shapes, the threads and one :func:`gate_row` per variant."""
        return {"shapes": self.shapes, "threads": LATENCY_THREADS, "rows": [gate_row(name, v, variants["fp32"]) for name, v in variants.items()]}


def paired_median_ms(sessions: list[Any], feeds: dict[str, np.ndarray], repeats: int, warmup: int = 2) -> list[float]:
    """Median milliseconds per call of each session, timed round-robin (one call of each in turn)."""
    import statistics
    import time

    for sess in sessions:
        for _ in range(warmup):
            sess.run(None, feeds)
    times: list[list[float]] = [[] for _ in sessions]
    for _ in range(repeats):
        for i, sess in enumerate(sessions):
            start = time.perf_counter()
            sess.run(None, feeds)
            times[i].append(time.perf_counter() - start)
    return [statistics.median(t) * 1000.0 for t in times]


def gate_row(name: str, variant: dict[str, Any], fp32: dict[str, Any]) -> dict[str, Any]:
    """One row of the gate table: ``variant``'s size, agreement and timings, its speed-up over
    ``fp32`` (against fp32's paired timings when it has them)."""
    agreement = variant.get("dev_agreement_with_fp32", variant.get("dev_mean_cosine_to_fp32"))
    return {
        "variant": name,
        "file": variant["file"],
        "megabytes": round(variant["bytes"] / 1e6, 1),
        "agreement": None if name == "fp32" else agreement,
        "agreement_kind": "top-1" if "dev_agreement_with_fp32" in variant else "cosine",
        "latency_ms_b1x128": variant["latency_ms_b1x128"],
        "speedup_vs_fp32": round(variant.get("fp32_paired_latency_ms_b1x128", fp32["latency_ms_b1x128"]) / variant["latency_ms_b1x128"], 2),
        "throughput_seq_per_s_b32x128": variant["throughput_seq_per_s_b32x128"],
        "throughput_vs_fp32": round(variant["throughput_seq_per_s_b32x128"] / variant.get("fp32_paired_throughput_seq_per_s_b32x128", fp32["throughput_seq_per_s_b32x128"]), 2),
        "ok": variant["ok"],
    }


def print_gate_table(gate_table: dict[str, Any], console: Console) -> None:
    """Print the variants' gate (agreement, latency, throughput, ok) as a rich table."""
    from rich.table import Table

    shapes = gate_table["shapes"]
    table = Table(
        title=f"export variants vs fp32 (ONNX Runtime, {gate_table['threads']} thread; each ratio against fp32 timed alternately with the variant)"
    )
    for column in ("variant", "MB", "agreement", f"ms @ {shapes['latency']}", "speed-up", f"seq/s @ {shapes['throughput']}", "x fp32", "ok"):
        table.add_column(column, justify="left" if column == "variant" else "right")
    for row in gate_table["rows"]:
        agreement = "-" if row["agreement"] is None else f"{row['agreement']:.4f} {row['agreement_kind']}"
        ok = "[green]yes[/green]" if row["ok"] else "[bold red]NO[/bold red]"
        table.add_row(row["variant"], f"{row['megabytes']:.1f}", agreement, f"{row['latency_ms_b1x128']:.2f}", f"{row['speedup_vs_fp32']:.2f}x",
                      f"{row['throughput_seq_per_s_b32x128']:.1f}", f"{row['throughput_vs_fp32']:.2f}x", ok)
    console.print(table)
