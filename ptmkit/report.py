"""``ptmkit report RUN [RUN ...]``: one self-contained HTML file of a run, or of runs side by side.

What it draws, from the files a run already holds (:mod:`ptmkit.rundir`), without TensorFlow:

* training curves per step: loss and every metric, learning rate, tokens per second
  (``logs/steps.jsonl``, written by :class:`ptmkit.training.progress.ProgressCallback`);
* fine-tuning dev accuracy per epoch (``logs/dev.jsonl``);
* the run's held-out and dev numbers (``metrics.json``), one column per run;
* the export's variants against fp32: agreement and latency (``export/manifest.json``'s gate);
* parameters per block, read from the weights file's HDF5 groups (``h5py``);
* for word vectors (families providing ``WORD_VECTORS``): the nearest neighbours of chosen words
  (:func:`ptmkit.wordvectors.similarity.most_similar`) and a 2-D PCA projection of the most
  frequent words.

Several runs share each figure's axes (one line per run), e.g. the objectives or families of one
comparison. Figures are matplotlib PNGs inlined as base64 ``data:`` URIs: the file opens offline.
"""

from __future__ import annotations

import base64
import html
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from ptmkit.errors import PtmkitError, RunDirError
from ptmkit.rundir import DEV_LOG, METRICS, STEP_LOG, RunDir

#: Fields of a step-log line that are not training metrics.
STEP_FIELDS = ("step", "seconds", "tokens_per_second", "learning_rate")
#: Word-vector runs: how many of the most frequent words the PCA projection shows and labels.
PCA_WORDS, PCA_LABELS = 300, 40


@dataclass
class RunView:
    """What the report shows of one run.

    Attributes:
        path: the run directory.
        name: its label in legends and table headers (the directory's name).
        manifest: ``manifest.json``.
        metrics: ``metrics.json`` (empty when missing).
        steps: ``logs/steps.jsonl``, the last line of each step, by step.
        dev: ``logs/dev.jsonl``, the last line of each epoch, by epoch.
        export: the gate rows of ``export/manifest.json``, or empty.
        parameters: ``(block, parameter count)`` per top-level block of the weights file.
    """

    path: Path
    name: str
    manifest: dict[str, Any]
    metrics: dict[str, Any]
    steps: list[dict[str, Any]] = field(default_factory=list)
    dev: list[dict[str, Any]] = field(default_factory=list)
    export: list[dict[str, Any]] = field(default_factory=list)
    parameters: list[tuple[str, int]] = field(default_factory=list)


def read_json_lines(path: Path, key: str) -> list[dict[str, Any]]:
    """The lines of a JSON-lines log, the last line of each ``key`` value (a resumed run rewrites
    the steps after its checkpoint), sorted by ``key``; lines that do not parse (cut by a crash)
    are skipped. A missing file gives ``[]``."""
    if not path.exists():
        return []
    records: dict[Any, dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and key in record:
            records[record[key]] = record
    return [records[k] for k in sorted(records)]


def parameters_per_block(weights: Path) -> list[tuple[str, int]]:
    """Parameters per block of a Keras ``.weights.h5`` file: each group under ``layers/`` one level
    below the model's (the backbone's embeddings, transformer layers, head), its datasets summed;
    the optimizer's state, which the file may also hold, is left out.

    Raises:
        RunDirError: the file is not HDF5.
    """
    import h5py

    counts: dict[str, int] = {}
    try:
        with h5py.File(weights, "r") as f:

            def visit(name: str, item: Any) -> None:
                if isinstance(item, h5py.Dataset) and name.split("/")[0] != "optimizer":  # Adam's moments are no parameters
                    parts = [p for p in name.split("/") if p not in ("layers", "vars")]
                    block = "/".join(parts[:2]) if len(parts) > 2 else parts[0]
                    counts[block] = counts.get(block, 0) + int(np.prod(item.shape))

            f.visititems(visit)
    except OSError as exc:
        raise RunDirError(f"{weights}: not a readable weights file ({str(exc).splitlines()[0]})") from None
    return sorted(counts.items(), key=lambda kv: -kv[1])


def read_view(path: str | Path) -> RunView:
    """Read what the report shows of the run at ``path``.

    Raises:
        RunDirError: ``path`` is not a finished run (no ``manifest.json``), or a file is corrupted.
    """
    run = RunDir(path)
    manifest = run.manifest()
    metrics = run.read_json(METRICS) if (run / METRICS).exists() else {}
    export_manifest = run / "export" / "manifest.json"
    export = json.loads(export_manifest.read_text(encoding="utf-8")).get("gate", {}).get("rows", []) if export_manifest.exists() else []
    weights = next((run / name for name in ("model.weights.h5", "backbone.weights.h5") if (run / name).exists()), None)
    return RunView(
        path=run.path, name=run.path.name, manifest=manifest, metrics=metrics,
        steps=read_json_lines(run / STEP_LOG, "step"), dev=read_json_lines(run / DEV_LOG, "epoch"), export=export,
        parameters=parameters_per_block(weights) if weights else [],
    )


def _png(figure: Any) -> str:
    """The figure as a base64 PNG ``data:`` URI."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _figure(width: float = 6.4, height: float = 3.4) -> tuple[Any, Any]:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height))
    axes = figure.subplots()
    axes.grid(True, alpha=0.3)
    return figure, axes


def curve_figures(views: Sequence[RunView]) -> list[tuple[str, str]]:
    """``(title, PNG URI)`` of each per-step series any run logged (loss and metrics first, then
    learning rate and tokens/s), every run a line on the same axes; then dev accuracy per epoch."""
    keys: list[str] = []
    for view in views:
        for record in view.steps:
            keys += [k for k in record if k not in keys and k not in STEP_FIELDS]
    keys = sorted(keys, key=lambda k: (k != "loss", k)) + ["learning_rate", "tokens_per_second"]
    titles = {"learning_rate": "learning rate", "tokens_per_second": "throughput (tokens/s)"}
    out = []
    for key in keys:
        series = [(view.name, [(r["step"], r[key]) for r in view.steps if key in r]) for view in views]
        series = [(name, points) for name, points in series if points]
        if series:
            out.append((titles.get(key, key), _line_figure(series, "step", titles.get(key, key))))
    dev = [(view.name, [(r["epoch"], r["dev_accuracy"]) for r in view.dev]) for view in views if view.dev]
    if dev:
        out.append(("dev accuracy per epoch", _line_figure(dev, "epoch", "dev accuracy", marker="o")))
    return out


def _line_figure(series: list[tuple[str, list[tuple[float, float]]]], xlabel: str, ylabel: str, marker: str | None = None) -> str:
    figure, axes = _figure()
    for name, points in series:
        x, y = zip(*points, strict=True)
        axes.plot(x, y, label=name, marker=marker)
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    if len(series) > 1:
        axes.legend(fontsize="small")
    return _png(figure)


def export_figure(view: RunView) -> str | None:
    """Latency at batch 1 and agreement with fp32 of each exported variant (the export's gate)."""
    rows = [r for r in view.export if r.get("latency_ms_b1x128") is not None or any(k.startswith("latency_ms") for k in r)]
    if not rows:
        return None
    latency_key = next(k for k in rows[0] if k.startswith("latency_ms"))
    figure, axes = _figure(6.4, 0.5 + 0.45 * len(rows))
    names = [r["variant"] for r in rows]
    values = [float(r[latency_key]) for r in rows]
    bars = axes.barh(names, values, color=["#4c72b0" if r.get("ok", True) else "#c44e52" for r in rows])
    for bar, row in zip(bars, rows, strict=True):
        agreement = row.get("agreement")
        label = "" if agreement is None else f" {row.get('agreement_kind', 'agreement')} {agreement:.4f}"
        axes.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {bar.get_width():.1f} ms{label}", va="center", fontsize="small")
    axes.invert_yaxis()
    axes.set_xlabel(f"latency, {latency_key.removeprefix('latency_ms_')} (ms, 1 thread; red: gate failed)")
    axes.set_xlim(0, max(values) * 1.6)
    return _png(figure)


def parameters_figure(view: RunView, top: int = 16) -> str | None:
    """Parameters per block, largest first (the rest summed in one bar)."""
    if not view.parameters:
        return None
    blocks = view.parameters[:top]
    rest = sum(count for _, count in view.parameters[top:])
    if rest:
        blocks = [*blocks, (f"{len(view.parameters) - top} more", rest)]
    figure, axes = _figure(6.4, 0.5 + 0.3 * len(blocks))
    axes.barh([name for name, _ in blocks], [count for _, count in blocks], color="#55a868")
    axes.invert_yaxis()
    axes.set_xlabel(f"parameters (total {sum(c for _, c in view.parameters):,})")
    axes.tick_params(axis="y", labelsize="small")
    return _png(figure)


def word_vector_sections(view: RunView, words: Sequence[str], topn: int = 8) -> tuple[list[dict[str, Any]], str | None]:
    """For a word-vector run: the nearest neighbours of ``words`` (default: the five most frequent
    alphabetic words of 3+ letters) and a PCA projection of the :data:`PCA_WORDS` most frequent
    words (first two principal components of the centred, L2-normalised vectors), the first
    :data:`PCA_LABELS` labelled. Other runs: ``([], None)``."""
    from ptmkit.wordvectors.commands import is_word_vector_run, load_vectors
    from ptmkit.wordvectors.similarity import most_similar

    if not is_word_vector_run(view.path):
        return [], None
    _, vectors = load_vectors(view.path, None)
    vocabulary = list(vectors.words)
    chosen = list(words) or [w for w in vocabulary if w.isalpha() and len(w) >= 3][:5]
    neighbours = []
    for word in chosen:
        found = most_similar(vectors, [word], topn=topn) if vectors.vector(word) is not None and np.any(vectors.vector(word)) else None
        neighbours.append({"word": word, "neighbors": found})
    count = min(PCA_WORDS, len(vocabulary))
    if count < 3:
        return neighbours, None
    matrix = np.stack([np.asarray(vectors.vector(w), np.float64) for w in vocabulary[:count]])
    matrix /= np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
    matrix -= matrix.mean(axis=0)
    _, _, components = np.linalg.svd(matrix, full_matrices=False)
    points = matrix @ components[:2].T
    figure, axes = _figure(6.4, 5.0)
    axes.scatter(points[:, 0], points[:, 1], s=6, alpha=0.5)
    for (x, y), word in zip(points[:PCA_LABELS], vocabulary[:PCA_LABELS], strict=True):
        axes.annotate(word, (x, y), fontsize="x-small")
    axes.set_xlabel("PC 1")
    axes.set_ylabel("PC 2")
    axes.set_title(f"the {count} most frequent words, PCA of the unit vectors", fontsize="small")
    return neighbours, _png(figure)


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.4g}"
        return html.escape("" if value is None else str(value))

    head = "".join(f"<th>{cell(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _summary(views: Sequence[RunView]) -> str:
    """The runs (family, stage, parent) and their metrics, one column per run."""
    info = [("family", "family"), ("stage", "stage"), ("head", "head"), ("parent", "parent"), ("created", "created")]
    rows = [[label, *(v.manifest.get(key) for v in views)] for label, key in info if any(v.manifest.get(key) for v in views)]
    keys: list[str] = []
    for view in views:
        keys += [k for k, value in view.metrics.items() if k not in keys and isinstance(value, int | float | str)]
    rows += [[key, *(v.metrics.get(key) for v in views)] for key in keys]
    return _table(["", *(v.name for v in views)], rows)


STYLE = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:.9em}td,th{border:1px solid #ddd;padding:.25em .6em;text-align:left}
th{background:#f4f4f4}.figs{display:flex;flex-wrap:wrap;gap:1em}figure{margin:0}figcaption{font-size:.85em;color:#555}"""


def render(views: Sequence[RunView], words: Sequence[str] = ()) -> str:
    """The report's HTML (:mod:`ptmkit.report`)."""
    parts = [f"<h1>ptmkit report: {html.escape(', '.join(v.name for v in views))}</h1>", "<h2>Runs and metrics</h2>", _summary(views)]
    parts.append("<p>" + "<br>".join(html.escape(str(v.path)) for v in views) + "</p>")
    curves = curve_figures(views)
    parts.append("<h2>Training</h2>")
    if curves:
        parts.append(_figures(curves))
    else:
        parts.append(f"<p>No step log ({STEP_LOG}): the run trains itself, or predates ptmkit's step log.</p>")
    for view in views:
        sections = [(f"{view.name}: exported variants", export_figure(view)), (f"{view.name}: parameters per block", parameters_figure(view))]
        neighbours, projection = word_vector_sections(view, words)
        sections.append((f"{view.name}: word vectors", projection))
        if any(png for _, png in sections) or neighbours:
            parts.append(f"<h2>{html.escape(view.name)}</h2>")
            parts.append(_figures([(title, png) for title, png in sections if png]))
        if neighbours:
            rows = [[n["word"], "no vector (out of the vocabulary, or no n-gram)" if n["neighbors"] is None else ", ".join(f"{w} ({s:.3f})" for w, s in n["neighbors"])] for n in neighbours]
            parts.append(_table(["word", "nearest neighbours (cosine)"], rows))
    body = "\n".join(parts)
    return f"<!doctype html><html><head><meta charset='utf-8'><title>ptmkit report</title><style>{STYLE}</style></head><body>{body}</body></html>\n"


def _figures(figures: Sequence[tuple[str, str]]) -> str:
    items = "".join(f"<figure><img alt='{html.escape(title)}' src='{png}'><figcaption>{html.escape(title)}</figcaption></figure>" for title, png in figures)
    return f"<div class='figs'>{items}</div>"


def write_report(runs: Sequence[str | Path], output: str | Path | None = None, words: Sequence[str] = (), console: Console | None = None) -> Path:
    """Write the report of ``runs`` (:func:`render`) to ``output`` atomically.

    Args:
        runs: run directories; several share each figure.
        output: the HTML file (default: ``RUN/report.html`` for one run, ``report.html`` here for
            several).
        words: word-vector runs: the words whose neighbours are listed.

    Returns:
        the path written.

    Raises:
        RunDirError: a path is not a finished run, or one of its files is corrupted.
        PtmkitError: no run given.
    """
    from ptmkit.io import atomic_write_text

    if not runs:
        raise PtmkitError("give at least one run directory")
    views = [read_view(run) for run in runs]
    target = Path(output) if output is not None else (views[0].path / "report.html" if len(views) == 1 else Path("report.html"))
    atomic_write_text(target, render(views, words))
    if console is not None:
        console.print(f"wrote {target}")
    return target
