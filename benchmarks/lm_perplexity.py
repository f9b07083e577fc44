"""Held-out per-word perplexity of the language models (GPT, NNLM) and their unigram models, after the
quickstart budget and after a longer wall-clock budget (30 minutes by default), on the same lines.

Each family is pre-trained on ``data/corpus/enwiki-106.txt`` twice:

* ``quickstart``: the lineage table's ``full`` budget (``benchmarks/lineage.py``): GPT's own
  quickstart plan (200 steps of 16 x 128 at 1e-3), the NNLM's defaults (3 epochs), lower-cased as
  the lineage row;
* ``N min``: the same run scaled to N minutes of this machine: its budget key (GPT
  ``train.max_steps``, NNLM ``model.epochs``) times N minutes over the quickstart run's own training
  seconds (so the longer run's length is fixed before it starts, reproducible, and reported; its
  actual seconds are reported beside it). ``--steps FAMILY=N`` sets it by hand. The NNLM's
  longer run stops early (``model.patience = 2``) on the 200 lines before the held-out ones
  (``model.validation_lines``, out of its training lines) and keeps its best epoch: without it,
  20 epochs overfit this corpus (held-out per-word perplexity 556 against 151 after 3 epochs).

Both families keep the corpus's last 200 non-blank lines out of training (and out of their
vocabularies) and score them per whitespace word (the sum of a line's token log-likelihoods over its
number of words; Bengio et al. 2003, section 4, for the NNLM; Radford et al. 2019, section 3.1, for
the per-word figure of an open-vocabulary model). Each run also reports the add-one unigram model of
its own training tokens on the same words: the perplexities of the two families are not comparable
with each other (the NNLM maps rare words to ``<unk>``, GPT's byte-level BPE has no unknown token),
their ratios to their own unigram models are.

Runs are cached in ``WORK/runs/FAMILY-BUDGET`` (an interrupted one resumes from its checkpoint)::

    python benchmarks/lm_perplexity.py --out benchmarks/results/lm_perplexity.md     # about 70 minutes on 2 cores
    python benchmarks/lm_perplexity.py --minutes 10                                  # a shorter long run
    python benchmarks/lm_perplexity.py --quick                                       # tiny models, a smoke test
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lineage  # noqa: E402  (the lineage table's budgets, tiny configs and subprocess runner)

#: The key that sets a family's length of training (its value in the quickstart run's config.toml
#: is the base the longer run scales).
BUDGET_KEYS = {"gpt": "train.max_steps", "nnlm": "model.epochs"}
#: The longer run's own settings: the NNLM overfits this corpus within a few epochs (its held-out
#: perplexity after 20 epochs was 3.7x the 3-epoch run's), so it stops early on the 200 lines before
#: the held-out ones, keeping its best epoch, as Bengio et al. 2003 trained. (full, --quick)
LONGER = {"nnlm": (["model.validation_lines=200", "model.patience=2"], ["model.validation_lines=20", "model.patience=2"])}
#: How often the longer run saves, as a share of its steps (GPT; the NNLM saves by seconds).
CHECKPOINTS_PER_RUN = 20


def config_value(run: Path, dotted: str) -> Any:
    """``section.key`` of a run's ``config.toml``.

    Raises:
        KeyError: the run's config has no such key.
    """
    section, key = dotted.split(".", 1)
    return tomllib.loads((run / "config.toml").read_text(encoding="utf-8"))[section][key]


def train_seconds(metrics: dict[str, Any]) -> float:
    """The training loop's own seconds, over every session of a resumed run."""
    for key in ("train_seconds_all_sessions", "train_seconds", "train_seconds_this_session"):
        if key in metrics:
            return float(metrics[key])
    raise KeyError("the run's metrics.json has no train_seconds")


def scaled_budget(base: int, base_seconds: float, minutes: float) -> int:
    """``base`` units of training took ``base_seconds``: the units that fill ``minutes`` (at least
    ``base``: the longer run is never shorter than the quickstart's)."""
    if base_seconds <= 0:
        raise ValueError(f"the quickstart run's training took {base_seconds} s")
    return max(base, round(base * minutes * 60.0 / base_seconds))


def train(family: str, run: Path, corpus: Path, overrides: list[str], log: Path) -> dict[str, Any]:
    """Pre-train (or resume, or reuse) a run; its metrics."""
    if not (run / "manifest.json").exists():
        interrupted = (run / "checkpoints").is_dir() or (run / "checkpoint").is_dir()
        sets = [arg for override in overrides for arg in ("--set", override)]
        lineage.ptmkit(
            "train", family, "--corpus", str(corpus), "--out", str(run), *sets, *(["--resume"] if interrupted else []), log=log
        )
    return json.loads((run / "metrics.json").read_text(encoding="utf-8"))


def row(family: str, budget: str, run: Path, metrics: dict[str, Any]) -> dict[str, Any]:
    key = BUDGET_KEYS[family]
    return {
        "family": family,
        "budget": budget,
        "budget_key": key,
        "budget_value": config_value(run, key),
        **{k: metrics[k] for k in ("best_epoch", "epochs_trained", "validation_lines") if k in metrics},
        "train_seconds": round(train_seconds(metrics), 1),
        **{k: v for k, v in metrics.items() if k.startswith("heldout_") and isinstance(v, int | float)},
    }


def run_family(family: str, args: argparse.Namespace, corpus: Path) -> list[dict[str, Any]]:
    base_overrides = lineage.QUICK[family] if args.quick else lineage.full_overrides(family)
    log = args.work / "logs" / f"{family}.log"
    first = args.work / "runs" / f"{family}-quickstart"
    print(f"{family}: quickstart budget ({' '.join(base_overrides)})", flush=True)
    metrics = train(family, first, corpus, base_overrides, log)
    rows = [row(family, "quickstart", first, metrics)]
    key = BUDGET_KEYS[family]
    units = args.steps.get(family) or scaled_budget(int(config_value(first, key)), train_seconds(metrics), args.minutes)
    longer = [override for override in base_overrides if not override.startswith(f"{key}=")] + [f"{key}={units}"]
    longer += LONGER.get(family, ([], []))[args.quick]
    if key == "train.max_steps":
        longer = [override for override in longer if not override.startswith("train.checkpoint_every=")]
        longer.append(f"train.checkpoint_every={max(1, units // CHECKPOINTS_PER_RUN)}")
    budget = f"{args.minutes:g} min"
    print(f"{family}: {budget} budget, {key}={units}", flush=True)
    second = args.work / "runs" / f"{family}-{args.minutes:g}min"
    rows.append(row(family, budget, second, train(family, second, corpus, longer, log)))
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    """One line per run and one per unigram model (each run's own, on the same words)."""
    lines = [
        "| budget | model | length | training s | held-out words | as `<unk>` | per-word perplexity | ratio to its unigram | per-token perplexity | bits per byte |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        unknown = r.get("heldout_unknown_targets", r.get("heldout_unknown_tokens"))
        model, unigram = r["heldout_word_perplexity"], r["heldout_unigram_word_perplexity"]
        token = r.get("heldout_token_perplexity", r.get("heldout_perplexity"))
        bpb = r.get("heldout_bits_per_byte")
        stopped = f", stopped after {r['epochs_trained']}, best {r['best_epoch']} on {r['validation_lines']} validation lines" if "best_epoch" in r else ""
        lines.append(
            f"| {r['budget']} | {r['family']} | `{r['budget_key']}={r['budget_value']}`{stopped} | {r['train_seconds']:,.0f} "
            f"| {r['heldout_words']:,} | {'-' if unknown is None else f'{unknown:,}'} | {model:,.1f} | {model / unigram:.3f} "
            f"| {'-' if token is None else f'{token:,.1f}'} | {'-' if bpb is None else f'{bpb:.3f}'} |"
        )
        lines.append(f"| {r['budget']} | unigram ({r['family']}'s tokens) | - | - | {r['heldout_words']:,} | - | {unigram:,.1f} | 1.000 | - | - |")
    return "\n".join(lines) + "\n"


def page(rows: list[dict[str, Any]], argv: list[str]) -> str:
    commit = subprocess.run(["git", "-C", str(lineage.REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    return (
        "# Language models: held-out per-word perplexity after the quickstart budget and a longer one\n\n"
        f"{datetime.date.today().isoformat()}, commit {commit}, load average at the end "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}, `python benchmarks/lm_perplexity.py {' '.join(argv)}`"
        f"{' (tiny models: a smoke test, the numbers say nothing)' if '--quick' in argv else ''}.\n\n"
        f"The corpus's last {rows[0].get('heldout_lines', '?')} non-blank lines, scored per whitespace word by every run; each run's unigram model "
        "(add-one, its own training tokens) on the same words. Compare families by the ratio, not the perplexities "
        "(the NNLM scores rare words as `<unk>`; GPT's byte-level BPE scores every byte).\n\n" + table(rows)
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny models on 300 corpus lines: a smoke test")
    parser.add_argument("--minutes", type=float, help="the longer budget, in minutes of this machine (default 30; --quick: 0.1)")
    parser.add_argument("--family", action="append", choices=sorted(BUDGET_KEYS), help="only these families (default: all)")
    parser.add_argument("--steps", action="append", default=[], metavar="FAMILY=N", help="the longer run's length, set by hand")
    parser.add_argument("--work", type=Path, help="runs and logs (default /tmp/ptmkit-lm-perplexity[-quick])")
    parser.add_argument("--out", type=Path, help="write the markdown page here")
    args = parser.parse_args(argv)
    try:
        args.steps = {family: int(n) for family, n in (item.split("=", 1) for item in args.steps)}
    except ValueError:
        parser.error(f"--steps takes FAMILY=N with an integer N, got {args.steps}")
    args.minutes = args.minutes or (0.1 if args.quick else 30.0)
    args.work = args.work or Path("/tmp/ptmkit-lm-perplexity" + ("-quick" if args.quick else ""))
    for directory in (args.work / "logs", args.work / "runs"):
        directory.mkdir(parents=True, exist_ok=True)
    corpus = lineage.prepare_data(args.work, args.quick)["corpus"]
    rows = [r for family in args.family or sorted(BUDGET_KEYS, reverse=True) for r in run_family(family, args, corpus)]
    rows.sort(key=lambda r: (r["budget"] != "quickstart", r["family"] != "nnlm"))
    lineage.print_and_write(page(rows, argv), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
