"""The command line's bad-input contract, end to end in subprocesses.

A user error (a missing, empty or malformed file, a bad config key, a broken run directory, an
unknown plugin) must end with exit code 2 and one line on standard error, ``error: ...``, that
names the file, line or key; no traceback (unless ``--debug``) and no half-written output.

One tiny pre-training run (about 10 s on two CPU cores) is shared by the whole module; its corpus
holds two lines of invalid UTF-8, which must be a warning and not an error.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import random
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
ENWIKI = REPO / "data" / "corpus" / "enwiki-106.txt"
POLARITY_TRAIN = REPO / "data" / "classify" / "polarity-200-train.txt"
POLARITY_DEV = REPO / "data" / "classify" / "polarity-200-dev.txt"

TINY = [
    "--set", "model.num_layers=1",
    "--set", "model.hidden_dim=32",
    "--set", "model.num_heads=2",
    "--set", "model.intermediate_dim=64",
    "--set", "model.vocabulary_size=300",
    "--set", "train.max_steps=2",
    "--set", "train.batch_size=4",
    "--set", "train.sequence_length=32",
    "--set", "train.heldout_lines=5",
]  # fmt: skip
BAD_UTF8_LINES = [b"caf\xe9 au lait is served in a bowl in the morning\n", b"the na\xefve reader \x93quoted\x94 it\n"]


@functools.cache
def cli() -> list[str]:
    """``python -m ptmkit.cli``, or the ``ptmkit`` script beside the interpreter if that fails."""
    module = [sys.executable, "-m", "ptmkit.cli"]
    probe = subprocess.run([*module, "--help"], capture_output=True, text=True, timeout=120)
    if probe.returncode == 0 and "train" in probe.stdout:
        return module
    script = Path(sys.executable).with_name("ptmkit")
    assert script.exists(), f"`python -m ptmkit.cli` failed ({probe.stderr[-500:]}) and {script} is missing"
    return [str(script)]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    for name in ("TF_CPP_MIN_LOG_LEVEL", "TF_ENABLE_ONEDNN_OPTS"):  # what a user's shell has: nothing
        env.pop(name, None)
    env["PYTHONIOENCODING"] = "utf-8"
    return env


def ptmkit(*args: str | Path, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*cli(), *map(str, args)], capture_output=True, text=True, cwd=cwd, env=_env(), timeout=timeout
    )


def in_process(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """``ptmkit ARGS`` run in this process (:func:`ptmkit.testing.run_cli`), its output captured
    as :func:`ptmkit`'s: for the successful commands that only need TensorFlow (imported here
    already), not for the error contract, which the child processes check."""
    import contextlib
    import io

    from ptmkit.testing import run_cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run_cli([str(a) for a in args])
    return subprocess.CompletedProcess(["ptmkit", *map(str, args)], code, out.getvalue(), err.getvalue())


def user_error(result: subprocess.CompletedProcess[str], *needles: str | Path, out: Path | None = None) -> str:
    """Check the one-line user-error contract; return the error line."""
    stderr = result.stderr
    assert "Traceback" not in stderr, stderr
    assert result.returncode == 2, f"exit {result.returncode}\n{stderr}"
    lines = [line.rstrip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1, stderr
    assert lines[-1] == errors[0], f"the error is not the last line of stderr:\n{stderr}"
    for needle in needles:
        assert str(needle) in errors[0], f"{needle!r} not in {errors[0]!r}"
    if out is not None:
        assert not out.exists(), f"half-written output left in {out}: {sorted(p.name for p in out.iterdir())}"
    return errors[0]


@dataclass
class TinyRun:
    run_dir: Path
    corpus: Path
    result: subprocess.CompletedProcess[str]


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> TinyRun:
    """``ptmkit train bert`` on the first 300 lines of enwiki-106.txt plus two lines of bad UTF-8."""
    root = tmp_path_factory.mktemp("tiny-pretrain")
    with open(ENWIKI, "rb") as handle:
        lines = [next(handle) for _ in range(300)]
    lines[100:100] = BAD_UTF8_LINES[:1]
    lines[201:201] = BAD_UTF8_LINES[1:]
    corpus = root / "enwiki-300-bad-utf8.txt"
    corpus.write_bytes(b"".join(lines))
    run_dir = root / "pre"
    result = ptmkit("train", "bert", "--corpus", corpus, "--out", run_dir, *TINY, cwd=root)
    assert result.returncode == 0, result.stderr
    return TinyRun(run_dir, corpus, result)


@pytest.fixture
def work(tmp_path: Path) -> Path:
    return tmp_path


def copy_run(run: TinyRun, target: Path) -> Path:
    shutil.copytree(run.run_dir, target)
    return target


# -- the entry point --------------------------------------------------------------------------------


def test_the_command_runs() -> None:
    result = subprocess.run([*cli(), "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0
    for command in ("train", "finetune", "export", "predict"):
        assert command in result.stdout
    assert "--debug" in result.stdout and "<bool>" not in result.stdout  # typer 0.29 printed a type after each flag


# -- corpora ---------------------------------------------------------------------------------------


def test_missing_corpus(work: Path) -> None:
    corpus, out = work / "no-such-corpus.txt", work / "run"
    result = ptmkit("train", "bert", "--corpus", corpus, "--out", out, *TINY, cwd=work)
    user_error(result, corpus, "no such corpus", out=out)


def test_empty_corpus(work: Path) -> None:
    corpus, out = work / "empty.txt", work / "run"
    corpus.write_bytes(b"")
    result = ptmkit("train", "bert", "--corpus", corpus, "--out", out, *TINY, cwd=work)
    user_error(result, f"{corpus}: no text to read (it is empty)", out=out)


def test_blank_lines_only_corpus(work: Path) -> None:
    corpus, out = work / "blank.txt", work / "run"
    corpus.write_text("\n   \n\t\n", encoding="utf-8")
    result = ptmkit("train", "bert", "--corpus", corpus, "--out", out, *TINY, cwd=work)
    user_error(result, f"{corpus}: no text to read (3 line(s), all blank)", out=out)


def test_invalid_utf8_is_a_warning_and_the_run_finishes(tiny_run: TinyRun) -> None:
    result = tiny_run.result
    assert result.returncode == 0
    assert "Traceback" not in result.stderr and "error:" not in result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:") and "UTF-8" in line]
    assert warnings == [
        f"warning: {tiny_run.corpus}: 2 line(s) had invalid UTF-8; the bad bytes were replaced by U+FFFD"
    ]
    assert "on 302 lines" in result.stderr  # the two bad lines were trained on, not dropped
    manifest = json.loads((tiny_run.run_dir / "manifest.json").read_text())
    assert manifest["stage"] == "pretrain" and manifest["head"] is None
    assert (tiny_run.run_dir / "backbone.weights.h5").stat().st_size > 0


def test_a_finished_run_is_not_overwritten(tiny_run: TinyRun, work: Path) -> None:
    manifest = (tiny_run.run_dir / "manifest.json").read_bytes()
    result = ptmkit("train", "bert", "--corpus", tiny_run.corpus, "--out", tiny_run.run_dir, *TINY, cwd=work)
    user_error(result, tiny_run.run_dir, "already holds a finished run")
    assert (tiny_run.run_dir / "manifest.json").read_bytes() == manifest


# -- labelled files ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def empty_label_result(tiny_run: TinyRun, tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    work = tmp_path_factory.mktemp("empty-label")
    train, out = work / "train.tsv", work / "ft"
    train.write_text("label\ttext\npos\ta fine film\n\tno label on this one\nneg\tdull\n", encoding="utf-8")
    result = ptmkit("finetune", tiny_run.run_dir, "--train", train, "--dev", POLARITY_DEV, "--out", out, cwd=work)
    return result, train, out


def test_label_file_with_an_empty_label(empty_label_result: tuple[subprocess.CompletedProcess[str], Path, Path]) -> None:
    result, train, out = empty_label_result
    assert user_error(result, out=out) == f"error: {train}:3: empty label"


def test_label_file_with_an_empty_text(tiny_run: TinyRun, work: Path) -> None:
    train, out = work / "train.txt", work / "ft"
    train.write_text("__label__pos a fine film\n\n__label__neg dull\n__label__neg   \n", encoding="utf-8")
    result = ptmkit("finetune", tiny_run.run_dir, "--train", train, "--dev", POLARITY_DEV, "--out", out, cwd=work)
    assert user_error(result, out=out) == f"error: {train}:4: label 'neg' has no text"


def test_finetune_user_error_prints_nothing_but_the_error(
    empty_label_result: tuple[subprocess.CompletedProcess[str], Path, Path],
) -> None:
    result, _, _ = empty_label_result
    noise = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith(("error:", "warning:"))]
    assert noise == []


def test_finetune_input_errors_are_refused_before_tensorflow_loads(tiny_run: TinyRun, work: Path) -> None:
    """A malformed label line, an unknown config key and a damaged weights file: each refused (exit
    2) by a process that has not imported TensorFlow (seconds saved on every such mistake)."""
    train = work / "train.txt"
    train.write_text("__label__pos a fine film\n__label__neg   \n", encoding="utf-8")
    damaged = copy_run(tiny_run, work / "pre")
    weights = damaged / "backbone.weights.h5"
    weights.write_bytes(weights.read_bytes()[:1000])
    common = ["--dev", str(POLARITY_DEV), "--out", str(work / "ft")]
    commands = [
        ["finetune", str(tiny_run.run_dir), "--train", str(train), *common],
        ["finetune", str(tiny_run.run_dir), "--train", str(POLARITY_TRAIN), *common, "--set", "finetune.epohcs=2"],
        ["finetune", str(damaged), "--train", str(POLARITY_TRAIN), *common],
    ]
    script = "import json, sys\nfrom ptmkit.cli import main\ncodes = [main(c) for c in json.loads(sys.argv[1])]\nprint(json.dumps([codes, 'tensorflow' in sys.modules]))"
    result = subprocess.run([sys.executable, "-c", script, json.dumps(commands)], capture_output=True, text=True, cwd=work, env=_env(), timeout=300)
    assert json.loads(result.stdout.splitlines()[-1]) == [[2, 2, 2], False], result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors[0] == f"error: {train}:2: label 'neg' has no text" and "finetune.epohcs" in errors[1]
    assert errors[2].startswith(f"error: {weights}: corrupted or incompatible weights file") and not (work / "ft").exists()


def test_evaluate_refuses_flags_of_the_other_mode(work: Path) -> None:
    """Word-vector flags with --parallel, search flags without it: refused, not silently ignored."""
    pairs = work / "pairs.tsv"
    pairs.write_text("a b\tc d\n", encoding="utf-8")
    user_error(in_process("evaluate", work, "--parallel", pairs, "--wordsim", pairs), "error: --wordsim: scores word vectors, not translations")
    user_error(in_process("evaluate", work, "--num-beams", "4", "--wordsim", pairs), "error: --num-beams: applies to translation; add --parallel")


# -- plugins and config --------------------------------------------------------------------------------


def test_unknown_plugin_lists_the_installed_families(tiny_run: TinyRun, work: Path) -> None:
    out = work / "run"
    result = ptmkit("train", "gpt9", "--corpus", tiny_run.corpus, "--out", out, cwd=work)
    line = user_error(result, "unknown model family 'gpt9'", out=out)
    assert "installed: " in line and "bert" in line.split("installed: ", 1)[1]


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ("train.max_stpes=3", "error: --set: unknown config key 'train.max_stpes' (did you mean 'train.max_steps'?)"),
        ("train.max_steps=three", "error: --set: config key 'train.max_steps' must be int, got 'three' (str)"),
    ],
    ids=["unknown-key", "mistyped-value"],
)
def test_bad_set(tiny_run: TinyRun, work: Path, setting: str, expected: str) -> None:
    out = work / "run"
    result = ptmkit("train", "bert", "--corpus", tiny_run.corpus, "--out", out, *TINY, "--set", setting, cwd=work)
    assert user_error(result, out=out) == expected


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ("[train]\nmax_steps = 2\nlearning_rte = 0.001\n", "unknown config key 'train.learning_rte' (did you mean 'train.learning_rate'?)"),
        ('[model]\nhidden_dim = "32"\n', "config key 'model.hidden_dim' must be int, got '32' (str)"),
        ("[train]\nmax_steps = 2\nbatch_size = \n", "invalid TOML"),
    ],
    ids=["unknown-key", "mistyped-value", "invalid-toml"],
)
def test_bad_config_file(tiny_run: TinyRun, work: Path, toml: str, expected: str) -> None:
    config, out = work / "run.toml", work / "run"
    config.write_text(toml, encoding="utf-8")
    result = ptmkit("train", "bert", "--corpus", tiny_run.corpus, "--out", out, "--config", config, cwd=work)
    line = user_error(result, out=out)
    assert line.startswith(f"error: {config}: {expected}")


def test_finetune_bad_config_file_names_the_file(tiny_run: TinyRun, work: Path) -> None:
    config, out = work / "ft.toml", work / "ft"
    config.write_text("[finetune]\nepochs = 1\nepohcs = 2\n", encoding="utf-8")
    result = ptmkit(
        "finetune", tiny_run.run_dir, "--train", POLARITY_TRAIN, "--dev", POLARITY_DEV, "--out", out, "--config", config, cwd=work
    )
    line = user_error(result, "unknown config key 'finetune.epohcs'", out=out)
    assert line.startswith(f"error: {config}: ")


def test_sequence_longer_than_the_model_leaves_no_run_directory(tiny_run: TinyRun, work: Path) -> None:
    out = work / "run"
    result = ptmkit(
        "train", "bert", "--corpus", tiny_run.corpus, "--out", out, *TINY, "--set", "model.max_sequence_length=16", cwd=work
    )
    user_error(result, "'train.sequence_length' = 32 exceeds 'model.max_sequence_length' = 16", out=out)


def test_finetune_sequence_longer_than_the_model_is_a_config_error(tiny_run: TinyRun, work: Path) -> None:
    out = work / "ft"
    result = ptmkit(
        "finetune", tiny_run.run_dir, "--train", POLARITY_DEV, "--dev", POLARITY_DEV, "--out", out,
        "--set", "finetune.sequence_length=1024", "--set", "finetune.epochs=1", cwd=work,
    )  # fmt: skip
    user_error(result, "finetune.sequence_length", out=out)


# -- broken run directories ----------------------------------------------------------------------------


def test_run_dir_with_a_missing_weights_file(tiny_run: TinyRun, work: Path) -> None:
    run, out = copy_run(tiny_run, work / "pre"), work / "ft"
    (run / "backbone.weights.h5").unlink()
    result = ptmkit("finetune", run, "--train", POLARITY_TRAIN, "--dev", POLARITY_DEV, "--out", out, cwd=work)
    user_error(result, run / "backbone.weights.h5", "missing", out=out)


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_run_dir_with_a_corrupted_weights_file(tiny_run: TinyRun, work: Path, damage: str) -> None:
    run, out = copy_run(tiny_run, work / "pre"), work / "ft"
    weights = run / "backbone.weights.h5"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2] if damage == "truncated" else random.Random(0).randbytes(len(data)))
    result = ptmkit("finetune", run, "--train", POLARITY_TRAIN, "--dev", POLARITY_DEV, "--out", out, cwd=work)
    user_error(result, weights, "corrupted or incompatible weights file", out=out)


def test_export_into_a_run_directory_is_refused_and_the_run_kept(tiny_run: TinyRun, work: Path) -> None:
    run = copy_run(tiny_run, work / "pre")
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    user_error(ptmkit("export", run, "--out", run, cwd=work), f"--out {run}: is the run directory", "the export would overwrite it")
    user_error(in_process("export", run, "--out", work), f"--out {work}: holds the run directory {run}")
    other = copy_run(tiny_run, work / "other")
    user_error(in_process("export", run, "--out", other), f"--out {other}: is a run directory")
    afile = work / "notes.txt"
    afile.write_text("keep me\n", encoding="utf-8")
    user_error(in_process("export", run, "--out", afile), f"--out {afile}: is a file, not a directory")
    assert afile.read_text(encoding="utf-8") == "keep me\n"
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before
    assert not (run / "export").exists() and not (other / "model.onnx").exists()


def test_an_export_given_where_a_run_is_needed_is_named(work: Path) -> None:
    export = work / "export"
    export.mkdir()
    (export / "manifest.json").write_text('{"format": "ptmkit-export/1", "family": "bert", "variants": {}}')
    result = in_process("finetune", export, "--train", POLARITY_TRAIN, "--dev", POLARITY_DEV, "--out", work / "ft")
    user_error(result, f"{export}: an ONNX export, not a run directory; give the run it was exported from", out=work / "ft")


def _has_tokenizer_extensions() -> bool:
    return importlib.util.find_spec("onnxruntime_extensions") is not None  # not importorskip: see ptmkit_export.tokenizer_graph._import_extensions


@dataclass
class EmbeddingExport:
    directory: Path
    triton: Path
    result: subprocess.CompletedProcess[str]


@pytest.fixture(scope="module")
def embedding_export(tiny_run: TinyRun, tmp_path_factory: pytest.TempPathFactory) -> EmbeddingExport:
    """``ptmkit export RUN --triton REPO --with-tokenizer`` of the head-less tiny run, once for the
    two tests that read it, in this process (a success, not the error contract: no TensorFlow
    import in a child); ``--with-tokenizer`` only where onnxruntime-extensions is installed. The
    tests only read the directory."""
    work = tmp_path_factory.mktemp("embedding-export")
    out, repo = work / "export", work / "repo"
    tokenizer = ["--with-tokenizer"] if _has_tokenizer_extensions() else []
    result = in_process("export", tiny_run.run_dir, "--out", out, "--triton", repo, *tokenizer)
    assert result.returncode == 0, result.stderr
    return EmbeddingExport(out, repo, result)


def test_a_run_without_a_head_exports_embeddings_that_predict_refuses(tiny_run: TinyRun, embedding_export: EmbeddingExport, work: Path) -> None:
    out = embedding_export.directory
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["task"] == "embedding" and manifest["outputs"][0]["name"] == "embeddings"
    (config,) = embedding_export.triton.glob("*/config.pbtxt")  # --triton: a Triton model repository beside the export
    assert 'name: "embeddings"' in config.read_text() and (config.parent / "1" / "model.onnx").is_file()
    user_error(ptmkit("predict", out, "--text", "a fine film", cwd=work), out, "embedding export", "ptmkit embed")
    texts = ["a fine film", "the history of anarchism in europe"]
    onnx_lines = ptmkit("embed", out, "--text", texts[0], "--text", texts[1], cwd=work)
    keras_lines = in_process("embed", tiny_run.run_dir, "--text", texts[0], "--text", texts[1])  # Keras: this process's TensorFlow
    assert onnx_lines.returncode == 0 and keras_lines.returncode == 0, onnx_lines.stderr + keras_lines.stderr
    onnx_rows = [json.loads(line) for line in onnx_lines.stdout.splitlines()]
    keras_rows = [json.loads(line) for line in keras_lines.stdout.splitlines()]
    assert [row["text"] for row in onnx_rows] == texts
    for a, b in zip(onnx_rows, keras_rows, strict=True):
        u, v = np.asarray(a["embedding"]), np.asarray(b["embedding"])
        assert u.shape == v.shape == (32,)  # model.hidden_dim of the tiny run
        assert float(u @ v / np.linalg.norm(u) / np.linalg.norm(v)) >= 0.99999


def test_export_with_tokenizer_writes_a_single_file_model_that_embeds_alike(embedding_export: EmbeddingExport, work: Path) -> None:
    """`ptmkit export --with-tokenizer`: model.with_tokenizer.onnx in the manifest; `ptmkit embed
    --variant fp32+tokenizer` (raw text into the graph) gives the two-step path's embeddings."""
    if not _has_tokenizer_extensions():
        pytest.skip("ptmkit-export[tokenizer] installs onnxruntime-extensions")
    out, result = embedding_export.directory, embedding_export.result
    assert "fp32+tokenizer: model.with_tokenizer.onnx, token ids identical to tokenizers" in result.stdout + result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    entry = manifest["variants"]["fp32+tokenizer"]
    assert entry["file"] == "model.with_tokenizer.onnx" and (out / entry["file"]).is_file()
    assert entry["check"]["token_id_mismatches"] == 0 and entry["latency_ms_b1x128"] > 0 and entry["two_step_latency_ms_b1x128"] > 0
    texts = ["a fine film", "Crème brûlée in Zürich, 東京 🤖", "the history of anarchism in europe " * 20]
    rows = {}
    for variant in ("fp32", "fp32+tokenizer"):
        lines = ptmkit("embed", out, "--variant", variant, *[a for t in texts for a in ("--text", t)], cwd=work)
        assert lines.returncode == 0, lines.stderr
        rows[variant] = [np.asarray(json.loads(line)["embedding"]) for line in lines.stdout.splitlines()]
    for a, b in zip(rows["fp32"], rows["fp32+tokenizer"], strict=True):
        assert float(np.max(np.abs(a - b))) <= 1e-5


def test_export_with_tokenizer_refuses_word_vectors(tiny_run: TinyRun, work: Path) -> None:
    word2vec = tiny_run.run_dir.parent / "no-such-word2vec-run"
    result = ptmkit("export", word2vec, "--vectors", "word2vec", "--output", work / "v.txt", "--with-tokenizer", cwd=work)
    user_error(result, "--with-tokenizer")


def test_predict_on_a_directory_without_manifest(work: Path) -> None:
    directory = work / "not-an-export"
    directory.mkdir()
    (directory / "model.onnx").write_bytes(b"not a model")
    result = ptmkit("predict", directory, "--text", "a fine film", cwd=work)
    user_error(result, directory / "manifest.json")
    assert result.stdout == ""


def test_debug_shows_the_traceback(work: Path) -> None:
    corpus, out = work / "no-such-corpus.txt", work / "run"
    result = ptmkit("--debug", "train", "bert", "--corpus", corpus, "--out", out, cwd=work)
    assert result.returncode != 0
    assert "Traceback (most recent call last)" in result.stderr
    assert f"ptmkit.errors.DataError: {corpus}: no such corpus file or directory" in result.stderr
    assert not out.exists()
