"""The ``--quick`` modes of benchmarks run end to end on tiny inputs, so the scripts cannot rot.

Those that train through ``ptmkit train`` in child processes (``distribute_steps.py``,
``pretrain_memory.py``, ``wordvectors_memory.py``) use a tiny model and the corpus's first 400 lines
and print tables whose figures hang together (the larger corpus holds twice the tokens, the
all-reduce volume is 4 bytes per parameter); ``tokenizer_in_graph.py`` exports a tiny random BERT
with MiniLM's tokenizer and makes its real check, equal token ids, on 40 texts of each set. No speed
or memory figure is asserted: timed assertions do not belong in tests."""

from __future__ import annotations

import re
from pathlib import Path

from benchmark_quick import run_quick


def test_distribute_steps_quick() -> None:
    printed = run_quick("distribute_steps.py")
    rows = dict(re.findall(r"^(none|mirrored|multi-worker, 2 workers): (\d+) ms/step, [\d,]+ tokens/s$", printed, re.MULTILINE))
    assert list(rows) == ["none", "mirrored", "multi-worker, 2 workers"], printed
    assert all(int(ms) > 0 for ms in rows.values())
    found = re.search(r"backbone parameters: ([\d,]+); .* x ([\d,]+) x 4 bytes = ([\d.]+) MB", printed)
    assert found, printed
    parameters = int(found.group(1).replace(",", ""))
    assert parameters == int(found.group(2).replace(",", "")) and 10_000 < parameters < 100_000  # the tiny BERT, not the default one
    assert float(found.group(3)) == round(parameters * 4 / 1e6, 1)


def test_pretrain_memory_quick() -> None:
    printed = run_quick("pretrain_memory.py")
    rows = {name: (int(lines.replace(",", "")), int(tokens.replace(",", ""))) for name, lines, tokens
            in re.findall(r"^(small|large) +[\d.]+ +([\d,]+) +([\d,]+) +[\d,]+ ", printed, re.MULTILINE)}
    assert rows["small"][0] == 400 and rows["large"] == (800, 2 * rows["small"][1]), printed
    assert re.search(r"^corpus x2, tokens x2: peak RSS large/small = [\d.]+ .* -> (flat|NOT flat)", printed, re.MULTILINE), printed
    assert {"tokenizer training", "tokenization", "training steps"} <= set(re.findall(r"^(tokenizer training|tokenization|training steps) ", printed, re.MULTILINE))


def test_wordvectors_memory_quick() -> None:
    printed = run_quick("wordvectors_memory.py")
    rows = re.findall(r"^\| (word2vec|glove) \| (x1|x2) \| ([\d,]+) \| ([\d,]+) MB \| \d+ s \|$", printed, re.MULTILINE)
    assert [(family, name) for family, name, _, _ in rows] == [("word2vec", "x1"), ("word2vec", "x2"), ("glove", "x1"), ("glove", "x2")], printed
    tokens = [int(count.replace(",", "")) for _, _, count, _ in rows]
    assert tokens[1] == 2 * tokens[0] and tokens[2:] == tokens[:2]
    assert all(int(rss.replace(",", "")) > 100 for *_, rss in rows)  # MB: the interpreter alone holds more


def test_tokenizer_in_graph_quick(tmp_path: Path) -> None:
    """The in-graph tokenizer gives tokenizers' ids on every text of the four sets (the check the
    full run makes on all of them), and the single-file export embeds as the two-step one does."""
    printed = run_quick("tokenizer_in_graph.py", "--work", str(tmp_path))
    sets = dict(re.findall(r"^  (wordnet glosses|polarity reviews|wikipedia paragraphs|hard cases) +(\d+) texts, 0 differ$", printed, re.MULTILINE))
    assert [int(sets.get(name, 0)) for name in ("wordnet glosses", "polarity reviews", "wikipedia paragraphs")] == [40, 40, 40], printed
    assert int(sets["hard cases"]) >= 20
    assert re.search(rf"^  total +{sum(map(int, sets.values()))} texts, 0 differ$", printed, re.MULTILINE), printed
    timed = re.findall(r"^    (embed: (?:fp32|int8)(?:\+tokenizer)?) +([\d.]+)$", printed, re.MULTILINE)
    assert [name for name, _ in timed] == ["embed: fp32", "embed: int8", "embed: fp32+tokenizer", "embed: int8+tokenizer"] * 2, printed
    found = re.search(r"single-file vs two-step: ([\d.e+-]+)$", printed, re.MULTILINE)
    assert found and float(found.group(1)) < 1e-5, printed
