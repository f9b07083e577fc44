"""Test helpers for plugin authors: :func:`check_family` and pytest fixtures.

One call gives a new model family the battery every family must pass, as keras-hub's
``run_backbone_test`` does for its backbones (keras_hub/src/tests/test_case.py), plus what
keras-hub does not check, the ONNX export::

    # tests/test_tiny_gpt.py in the ptmkit-tiny-gpt distribution (installed, e.g. pip install -e .)
    from ptmkit.testing import check_family
    from ptmkit_tiny_gpt import TinyGPT

    pytest_plugins = ["ptmkit.testing"]  # the fixtures below

    def test_tiny_gpt_fits_the_contract(tmp_path):
        report = check_family(TinyGPT(), tmp_path, overrides=["model.hidden_dim=16"])
        assert report["parity_max_abs_diff"] < 1e-4

:func:`check_family` (for families the core pre-trains: a backbone, a tokenizer, objectives):

1. the declarations are well formed (:func:`check_declarations`);
2. ``ptmkit train`` runs one step on a tiny corpus through the core, as a user's run would
   (:func:`ptmkit.training.pretrain.pretrain`), and its loss is finite;
3. a freshly built backbone has exactly the declared inputs (names, dtypes, fixed sizes) and
   outputs, and its outputs have the declared axes at two shapes (:func:`check_backbone`);
4. ``ptmkit export`` converts the run to ONNX and checks it against Keras at shapes other than
   the trace's (raising when they differ by more than 1e-4), and the lean runtime
   (:class:`ptmkit_export.Predictor`) gives Keras' embeddings on texts of several lengths.

Fixtures (``pytest_plugins = ["ptmkit.testing"]``): ``tiny_corpus`` (a generated text file),
``tiny_labelled`` (train and dev files in fastText's ``__label__`` format), ``tiny_run`` (a
factory: ``tiny_run("my-family", "model.hidden_dim=16")`` pre-trains a run for a few steps and
returns its directory) and ``ptmkit_cli`` (runs ``ptmkit ARGS...`` in a subprocess).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ptmkit.contract import TOKENIZER_FIELDS, ModelFamily, TrainsItself

#: ``[train]`` settings of a run that takes seconds on a CPU.
TINY_TRAIN = (
    "train.batch_size=4",
    "train.sequence_length=16",
    "train.max_steps=2",
    "train.checkpoint_every=1",
    "train.heldout_lines=8",
    "train.learning_rate=1e-3",
    "finetune.sequence_length=16",
)
_WORDS = {
    "subject": "the cat|a dog|my neighbour|the old sailor|a small child|the committee|every student|the river".split("|"),
    "verb": "saw|liked|crossed|painted|followed|remembered|wrote about|ignored".split("|"),
    "object": "the bridge|a red house|the long winter|an open window|the city lights|a quiet garden|the last train".split("|"),
    "tail": "yesterday|at night|with care|for years|in silence|again and again|before dawn".split("|"),
}
#: 50 sentences on which an imported tokenizer must give the ids of the checkpoint's own
#: (Hugging Face) tokenizer: accents, Greek, Cyrillic, Hebrew, Arabic, Devanagari, CJK, Hangul,
#: emoji with modifiers and flags, ligatures, zero-width and combining characters, URLs, tabs,
#: newlines, runs of spaces, the empty string.
TOKENIZER_SENTENCES = [
    "The quick brown fox jumps over the lazy dog.", "naïve café façade", "Ελληνικά γράμματα", "中文分词测试", "日本語のテキスト", "emoji 🙂 👍🏽",
    "tab\tseparated", "multiple   spaces", "  leading", "trailing  ", "CAPS and lower", "numbers 12345 67.89", "punctuation!?;:", "don't won't it's",
    "Ünïcödé ßtraße", "Привет, мир", "עברית", "العربية", "हिन्दी", "한국어 문장", "a\nnewline", "mixed 中 English", "über-long-hyphenated-word",
    "e-mail@example.com", "http://example.org/path?q=1", "C++ and C#", "$100 €200 £300", "½ ¼ ¾", "x²+y²=z²", "€", "", " ", "a", "ab ab ab ab",
    "the the the", "Zürich", "São Paulo", "Kraków", "Île-de-France", "Ngũgĩ wa Thiong'o", "smörgåsbord", "piñata", "crème brûlée", "jalapeño",
    "Ærøskøbing", "ﬁ ligature", "zero\u200bwidth", "combining e\u0301", "🇫🇷 flag", "end.",
]
_GOOD = "wonderful|moving|bright|clever|warm|delightful".split("|")
_BAD = "dull|tedious|clumsy|forgettable|bland|tiresome".split("|")


def tiny_texts(count: int, seed: int = 0) -> list[str]:
    """``count`` generated English sentences of 6-12 words (deterministic for a seed)."""
    rng = np.random.default_rng(seed)
    return [" ".join(str(rng.choice(_WORDS[part])) for part in ("subject", "verb", "object", "tail")) + "." for _ in range(count)]


def write_tiny_corpus(path: Path, lines: int = 120, seed: int = 0) -> Path:
    """A corpus file of :func:`tiny_texts`, one paragraph (two sentences) a line."""
    texts = tiny_texts(2 * lines, seed)
    path.write_text("".join(f"{a} {b}\n" for a, b in zip(texts[::2], texts[1::2], strict=True)), encoding="utf-8")
    return path


def write_tiny_labelled(directory: Path, train: int = 48, dev: int = 16, seed: int = 0) -> tuple[Path, Path]:
    """``train.txt`` and ``dev.txt`` in fastText's format: ``__label__pos`` texts hold a word of
    praise, ``__label__neg`` texts a word of blame (learnable from words alone)."""
    rng = np.random.default_rng(seed)
    paths: list[Path] = []
    for name, count in (("train", train), ("dev", dev)):
        lines = []
        for i, text in enumerate(tiny_texts(count, seed + len(paths) + 1)):
            label, words = ("pos", _GOOD) if i % 2 == 0 else ("neg", _BAD)
            lines.append(f"__label__{label} {text[:-1]}, {rng.choice(words)}.\n")
        path = directory / f"{name}.txt"
        path.write_text("".join(lines), encoding="utf-8")
        paths.append(path)
    return paths[0], paths[1]


def check_declarations(family: ModelFamily) -> None:
    """Fail (``AssertionError`` naming the family) unless its declarations are usable by the
    core's pre-training and export: named, unique inputs fed from tokenizer fields, declared
    outputs, known special-token roles."""
    from ptmkit.contract import SPECIAL_TOKEN_ROLES

    name = family.name
    assert family.inputs, f"{name}: declares no inputs"
    names = [spec.name for spec in family.inputs]
    assert len(set(names)) == len(names), f"{name}: input names repeat: {names}"
    for spec in family.inputs:
        assert spec.field in TOKENIZER_FIELDS, f"{name}: input {spec.name!r} comes from {spec.field!r}, not a tokenizer field ({', '.join(TOKENIZER_FIELDS)})"
        assert spec.axes[:2] == ("batch", "sequence"), f"{name}: input {spec.name!r} axes {spec.axes} must start with batch, sequence"
    assert family.outputs, f"{name}: declares no outputs"
    unknown = set(family.special_token_names) - set(SPECIAL_TOKEN_ROLES)
    assert not unknown, f"{name}: unknown special-token roles {sorted(unknown)}"


def check_backbone(family: ModelFamily, backbone: Any, tokenizer: Any, config: Any, lengths: Sequence[int] = (3, 7)) -> dict[str, tuple[int, ...]]:
    """Fail unless ``backbone`` has exactly ``family``'s declared inputs and outputs, and each
    output has its declared axes (``batch`` and ``sequence`` sized as fed) at batch 2 x each
    of ``lengths`` (cut to the declared limit).

    Returns:
        ``{output name: shape}`` at the last length.
    """
    from ptmkit.data.tokenization import character_table
    from ptmkit.exporting import random_inputs

    name = family.name
    inputs = backbone.input
    assert isinstance(inputs, dict), f"{name}: the backbone must take a dict of inputs, got {type(inputs).__name__}"
    assert set(inputs) == set(family.input_names), f"{name}: backbone inputs {sorted(inputs)} differ from the declared {list(family.input_names)}"
    for spec in family.inputs:
        tensor = inputs[spec.name]
        assert tuple(tensor.shape[1:]) == spec.shape, f"{name}: input {spec.name!r} has shape {tuple(tensor.shape)}, declared (batch, *{spec.shape})"
        assert str(tensor.dtype) == spec.dtype, f"{name}: input {spec.name!r} is {tensor.dtype}, declared {spec.dtype}"
    limits = family.limits(config)
    characters = character_table(tokenizer, family.inputs)
    vocabulary = limits.vocabulary_size or tokenizer.get_vocab_size()
    shapes: dict[str, tuple[int, ...]] = {}
    for length in lengths:
        length = min(length, limits.max_sequence_length or length)
        feeds = random_inputs(np.random.default_rng(length), family.inputs, 2, length, vocabulary, family.special_tokens(tokenizer).padding_id, characters)
        outputs = backbone(feeds, training=False)
        assert isinstance(outputs, dict), f"{name}: the backbone must return a dict of outputs"
        assert set(outputs) == {spec.name for spec in family.outputs}, f"{name}: backbone outputs {sorted(outputs)} differ from the declared"
        for out in family.outputs:
            shape = tuple(int(d) for d in outputs[out.name].shape)
            assert len(shape) == len(out.axes), f"{name}: output {out.name!r} has shape {shape}, declared axes {out.axes}"
            expected = {"batch": 2, "sequence": length}
            wrong = [axis for axis, size in zip(out.axes, shape, strict=True) if axis in expected and size != expected[axis]]
            assert not wrong, f"{name}: output {out.name!r} has shape {shape} for batch 2 x {length}; axes {wrong} disagree"
            assert np.all(np.isfinite(np.asarray(outputs[out.name]))), f"{name}: output {out.name!r} is not finite"
            shapes[out.name] = shape
    return shapes


def tiny_pretrain(family: str, corpus: Path, out: Path, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """``ptmkit train FAMILY`` for :data:`TINY_TRAIN` steps (overrides after them); the metrics."""
    from ptmkit.training.pretrain import pretrain

    return pretrain(family, corpus, out, overrides=[*TINY_TRAIN, *overrides])


def run_cli(argv: Sequence[str]) -> int:
    """Run ``ptmkit ARGV...`` in this process (as the console script would) and return its exit
    code: 0 done, 2 bad input (the one-line error is on stderr). The in-process counterpart of the
    :func:`ptmkit_cli` fixture: no interpreter start or re-import per command (seconds each), but
    the command's plugins are those this process has registered, and a crash takes the test down."""
    from ptmkit.cli import main

    return main(list(argv))


def check_family(family: ModelFamily, workdir: Path, overrides: Sequence[str] = (), corpus: Path | None = None) -> dict[str, Any]:
    """Run the contract's battery on ``family`` (see the module docstring); ``family`` must be
    installed (its plugin's entry point on ``sys.path``), as in its plugin's own tests.

    Args:
        family: an instance of the family under test.
        workdir: an empty directory for the corpus, the run and its export (``tmp_path``).
        overrides: ``section.key=value`` settings that make the model tiny.
        corpus: a text file; default :func:`write_tiny_corpus`.

    Returns:
        ``{"loss", "outputs": {name: shape}, "parity_max_abs_diff", "runtime_max_abs_diff", "run", "export"}``.

    Raises:
        AssertionError: the family breaks the contract (the message names what).
        TypeError: a family that trains itself (test it through its ``train``).
    """
    from ptmkit.embedding import embed_texts, load_embedder
    from ptmkit.exporting import export_run
    from ptmkit.plugins import get_registry
    from ptmkit.rundir import RunDir
    from ptmkit.training.finetune import load_backbone
    from ptmkit_export import Predictor

    if isinstance(family, TrainsItself):
        raise TypeError(f"{family.name} trains itself; check_family covers families the core pre-trains")
    registry = get_registry()
    installed = registry.families.get(family.name)
    assert type(installed) is type(family), f"{family.name}: not installed (registered: {type(installed).__name__}); install the plugin's distribution"
    check_declarations(family)
    corpus = corpus or write_tiny_corpus(workdir / "corpus.txt")
    metrics = tiny_pretrain(family.name, corpus, workdir / "run", overrides)
    assert math.isfinite(metrics["heldout_loss"]), f"{family.name}: held-out loss {metrics['heldout_loss']}"
    _, config, tokenizer, _ = load_backbone(registry, RunDir(workdir / "run"))
    shapes = check_backbone(family, family.build_backbone(config.model), tokenizer, config.model)
    manifest = export_run(workdir / "run", workdir / "export")
    texts = tiny_texts(5, seed=7)
    texts = [" ".join(text.split()[: 2 + 2 * i]) for i, text in enumerate(texts)]  # 2 to 10 words
    model, tokenizer, pooling, _ = load_embedder(workdir / "run")
    expected = embed_texts(model, tokenizer, texts, int(pooling["max_sequence_length"]), family.inputs, family.special_tokens(tokenizer).padding_id)
    actual = Predictor(workdir / "export").embed(texts)
    runtime_diff = float(np.max(np.abs(expected - actual)))
    assert runtime_diff < 1e-4, f"{family.name}: the lean runtime's embeddings differ from Keras' by {runtime_diff:.2e}"
    return {
        "loss": metrics["heldout_loss"],
        "outputs": shapes,
        "parity_max_abs_diff": max(manifest["variants"]["fp32"]["parity_max_abs_diff"].values()),
        "runtime_max_abs_diff": runtime_diff,
        "run": workdir / "run",
        "export": workdir / "export",
    }


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generated corpus of 120 two-sentence lines (:func:`write_tiny_corpus`)."""
    return write_tiny_corpus(tmp_path_factory.mktemp("ptmkit-corpus") / "tiny.txt")


@pytest.fixture(scope="session")
def tiny_labelled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """``(train, dev)`` labelled files (:func:`write_tiny_labelled`)."""
    return write_tiny_labelled(tmp_path_factory.mktemp("ptmkit-labelled"))


@pytest.fixture
def tiny_run(tmp_path: Path, tiny_corpus: Path) -> Callable[..., Path]:
    """A factory: ``tiny_run(family, *overrides)`` pre-trains a tiny run of ``family`` on
    ``tiny_corpus`` (:func:`tiny_pretrain`) and returns its directory."""

    def make(family: str, *overrides: str) -> Path:
        out = tmp_path / f"run-{family}"
        tiny_pretrain(family, tiny_corpus, out, overrides)
        return out

    return make


@pytest.fixture
def ptmkit_cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run ``ptmkit ARGS...`` in a subprocess with this process's ``sys.path`` (so the plugins a
    test put there are installed for it too); returns the completed process (``returncode``,
    ``stdout``, ``stderr``)."""

    def run(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        path = os.pathsep.join([p for p in sys.path if p] + [os.environ.get("PYTHONPATH", "")])
        environment = {**os.environ, "PYTHONPATH": path, **(env or {})}
        return subprocess.run([sys.executable, "-m", "ptmkit.cli", *args], capture_output=True, text=True, env=environment, timeout=timeout)

    return run


def hf_reference(script: str, job: dict[str, Any], timeout: float = 600) -> dict[str, Any]:
    """Run a Hugging Face ``transformers`` reference ``script`` in a child Python process.

    The script reads ``job`` as JSON on stdin (typically: where to ``save_pretrained`` a
    random-init model, the shapes and sentences to run) and prints its results as JSON on its last
    stdout line, which is returned. It runs apart because torch crashes when it is imported after
    TensorFlow, which a test process has loaded. Skips the calling test when torch or transformers
    is not installed (ptmkit's test extra installs both); fails it, with the child's stderr, when
    the script exits non-zero.
    """
    import importlib.util
    import json

    for module in ("torch", "transformers"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"the test extra installs {module}")
    result = subprocess.run([sys.executable, "-c", script], input=json.dumps(job), capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def edit_hf_config(directory: Path, **changes: Any) -> None:
    """Overwrite keys of ``directory/config.json`` (a Hugging Face checkpoint) with ``changes``."""
    import json

    path = Path(directory) / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text(encoding="utf-8")), **changes}), encoding="utf-8")


def import_hf_refusal(checkpoint: Path, breaker: Callable[[Path], object], workdir: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """Copy ``checkpoint`` into ``workdir``, break the copy with ``breaker(copy)``, and check that
    ``ptmkit import-hf COPY --out RUN`` refuses it as bad input should: exit code 2, exactly one
    line on stderr, and no run directory left behind. Returns that line (for the caller to check
    that it names the file and key)."""
    import shutil

    from ptmkit.cli import main

    directory, out = Path(workdir) / "ckpt", Path(workdir) / "run"
    shutil.copytree(checkpoint, directory)
    breaker(directory)
    capsys.readouterr()
    assert main(["import-hf", str(directory), "--out", str(out)]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert not out.exists()
    return lines[0]


#: The core's stages a plugin's tests drive directly, reachable as ``from ptmkit.testing import
#: NAME`` so that plugin tests, like plugin code, import one declared surface: the command line's
#: ``main(argv) -> exit code``, the pre-training/fine-tuning/export/embedding stages and the
#: word-vector readers, evaluators and ONNX export. Each is imported when first used.
CORE_STAGES: dict[str, str] = {
    "main": "ptmkit.cli",
    "encode_texts": "ptmkit.data.tokenization",
    "embed_texts": "ptmkit.embedding",
    "load_embedder": "ptmkit.embedding",
    "cosine": "ptmkit.exporting",
    "export_run": "ptmkit.exporting",
    "pretrain": "ptmkit.training.pretrain",
    "finetune": "ptmkit.training.finetune",
    "head_importance": "ptmkit.compress",
    "PermutationLMConfig": "ptmkit.objectives.plm",
    "attention_masks": "ptmkit.objectives.plm",
    "permutation_batch": "ptmkit.objectives.plm",
    "load_backbone": "ptmkit.training.finetune",
    "load_classifier": "ptmkit.training.finetune",
    "load_labelled": "ptmkit.training.finetune",
    "load_vectors": "ptmkit.wordvectors.commands",
    "evaluate_analogies": "ptmkit.wordvectors.evaluation",
    "evaluate_word_pairs": "ptmkit.wordvectors.evaluation",
    "read_vectors": "ptmkit.wordvectors.formats",
    "encode_words": "ptmkit.exporting.vectors",
    "row_export": "ptmkit.exporting.rows",
    "layer_lr_multipliers": "ptmkit.training.strategies",
    "unfreeze_steps": "ptmkit.training.strategies",
    "SlantedTriangular": "ptmkit.training.schedule",
}
#: Names of :data:`CORE_STAGES` that are the module itself (tests patch its limits).
CORE_MODULES = frozenset({"row_export"})


def __getattr__(name: str) -> Any:
    """A name of :data:`CORE_STAGES`, imported on first use (the stages import TensorFlow)."""
    import importlib

    if name not in CORE_STAGES:
        raise AttributeError(f"module 'ptmkit.testing' has no attribute {name!r}")
    module = importlib.import_module(CORE_STAGES[name])
    return module if name in CORE_MODULES else getattr(module, name)
