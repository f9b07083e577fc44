"""Denoising pre-training of the transformer family on a corpus (``--objective bart``,
``t5_span``, ``mass``): the loss falls on a tiny repeated corpus, the batches fed to ``fit`` are
the noise functions' outputs for the run's seed, a translation run starts from the pre-trained
weights (``--init``), and bad flags and keys are refused in one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from inplugins import in_tree_plugins  # noqa: F401 - the fixture
from transformer_pairs import check_resume_after_interrupt, short_pairs, write_pairs

from ptmkit.testing import main

pytestmark = pytest.mark.usefixtures("in_tree_plugins")

CORPUS = Path(__file__).resolve().parents[3] / "data" / "corpus" / "enwiki-106.txt"
OBJECTIVES = ("bart", "t5_span", "mass")
STEPS = 30
TINY = [
    "model.vocabulary_size=300", "model.min_frequency=1", "model.encoder_layers=1", "model.decoder_layers=1", "model.hidden_dim=32",
    "model.num_heads=2", "model.intermediate_dim=64", "model.dropout=0.0", "model.max_sequence_length=40", "model.batch_size=16",
    f"model.max_steps={STEPS}", "model.warmup_steps=10", "model.checkpoint_every=15", "model.dev_sentences=0", "model.label_smoothing=0.0",
    "model.seed=3",
]
#: Steps whose batches the tests rebuild from the noise functions.
CHECKED_STEPS = (0, 7)


def _sets(overrides: list[str]) -> list[str]:
    return [arg for item in overrides for arg in ("--set", item)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """300 lines: the first 30 sentences of the shipped corpus, each 10 times (a tiny model can learn them)."""
    lines = [line.split(". ")[0] + "." for line in CORPUS.read_text(encoding="utf-8").splitlines()[:30]]
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text("\n".join(lines * 10) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def denoising_runs(tmp_path_factory: pytest.TempPathFactory, corpus: Path) -> dict[str, tuple[Path, dict[int, Any]]]:
    """``objective -> (run, {step: the batch fit received})`` of a 30-step run of each objective."""
    from inplugins import registered

    import ptmkit_transformer.train as train

    runs = {}
    original = train.step_batches
    for objective in OBJECTIVES:
        seen: dict[int, Any] = {}

        def recording(make: Any, start: int, stop: int, seen: dict[int, Any] = seen) -> Any:
            def kept(step: int) -> Any:
                batch = make(step)
                if step in CHECKED_STEPS:
                    seen[step] = batch
                return batch

            return original(kept, start, stop)

        run = tmp_path_factory.mktemp(objective) / "run"
        with registered(), pytest.MonkeyPatch.context() as patch:
            patch.setattr(train, "step_batches", recording)
            assert main(["train", "transformer", "--corpus", str(corpus), "--objective", objective, "--out", str(run), *_sets(TINY)]) == 0
        runs[objective] = (run, seen)
    return runs


def _losses(run: Path) -> dict[int, float]:
    return {json.loads(line)["step"]: json.loads(line)["loss"] for line in (run / "logs" / "steps.jsonl").read_text().splitlines()}


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_denoising_loss_falls(denoising_runs: dict[str, tuple[Path, dict[int, Any]]], objective: str) -> None:
    run, _ = denoising_runs[objective]
    losses = _losses(run)
    first, last = losses[1], losses[STEPS]  # step 1's loss; the mean over steps 28-30 (the callback's window)
    assert np.isfinite(list(losses.values())).all()
    # The N(0, 0.02) initialisation (init_std's default) starts at the uniform ln(300) = 5.70 nats;
    # 30 steps take it well below (measured 3.54 bart, 4.06 t5_span, 4.90 mass: mostly the tokens'
    # frequencies).
    assert abs(first - np.log(300)) < 0.15 and last < np.log(300) - 0.6, (objective, first, last)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["stage"] == "pretrain" and manifest["corpus"].endswith("corpus.txt")
    assert json.loads((run / "metrics.json").read_text())["objective"] == objective
    print(f"{objective}: loss {first:.3f} (step 1) -> {last:.3f} (steps 28-30)")


def _expected_pairs(objective: str, run: Path, corpus: Path, step: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The step's pairs rebuilt from the noise functions themselves (not through the objective's code)."""
    from ptmkit.api import RunDir, read_toml
    from ptmkit_transformer import noising
    from ptmkit_transformer.config import TransformerConfig
    from ptmkit_transformer.denoising import MASK, sentinel, sentinel_count
    from ptmkit_transformer.objectives import step_indices
    from ptmkit_transformer.train import read_documents

    config = TransformerConfig(**read_toml(run / "config.toml")["model"])
    tokenizer = RunDir(run).load_tokenizer()
    mask = tokenizer.token_to_id(MASK)
    sentinels = [tokenizer.token_to_id(sentinel(i)) for i in range(sentinel_count(config))]
    documents, _ = read_documents(corpus, tokenizer, config)
    rng = np.random.default_rng([config.seed, 29, step])
    sources, targets = [], []
    for row in step_indices(config.seed, step, config.batch_size, len(documents)):
        document = np.concatenate(documents[row])
        if objective == "bart":  # the defaults: sentence permutation, then text infilling (30%, Poisson(3))
            source = noising.text_infilling(noising.sentence_permutation(documents[row], rng), rng, mask, 0.3, 3.0)
            target = document
        elif objective == "t5_span":
            source, target = noising.t5_span_corruption(document, rng, sentinels, 0.15, 3.0)
        else:
            source, _, target = noising.mass_fragment(document, rng, mask, 0.5)
        sources.append(source)
        targets.append(target)
    return sources, targets


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_batches_fed_to_the_model_are_the_noise_functions_output(denoising_runs: dict[str, tuple[Path, dict[int, Any]]], corpus: Path, objective: str) -> None:
    run, seen = denoising_runs[objective]
    assert sorted(seen) == list(CHECKED_STEPS)
    for step in CHECKED_STEPS:
        inputs, labels, _ = seen[step]
        sources, targets = _expected_pairs(objective, run, corpus, step)
        for row, (source, target) in enumerate(zip(sources, targets, strict=True)):
            encoder = inputs["encoder_token_ids"][row][inputs["encoder_padding_mask"][row] > 0].tolist()
            assert encoder == [*source.tolist()[:39], 3], (objective, step, row)  # source </s>, cut at max_sequence_length - 1
            decoder = inputs["decoder_token_ids"][row][inputs["decoder_padding_mask"][row] > 0].tolist()
            assert decoder == [2, *target.tolist()]  # <s> target
            assert labels["logits"][row][: len(target) + 1].tolist() == [*target.tolist(), 3]  # target </s>
        if objective == "bart":
            assert any(4 in s.tolist() for s in sources)  # <mask> (id 4) is in the noised sources


def test_translation_starts_from_the_denoising_weights(denoising_runs: dict[str, tuple[Path, dict[int, Any]]], tmp_path: Path) -> None:
    import ptmkit_transformer.train as train
    from ptmkit.api import read_toml
    from ptmkit_transformer.backbone import build_backbone
    from ptmkit_transformer.config import TransformerConfig

    pretrained, _ = denoising_runs["bart"]
    built: list[Any] = []
    at_start: list[list[np.ndarray]] = []
    compiled, batches = train.compiled_model, train.step_batches

    def remember(config: Any) -> Any:
        built.append(compiled(config))
        return built[-1]

    def snapshot(*args: Any) -> Any:  # fit's data, asked for after the weights are loaded and before any step
        at_start.append([np.array(w) for w in built[-1][0].get_weights()])
        return batches(*args)

    pairs = write_pairs(tmp_path / "pairs.tsv", short_pairs())
    out = tmp_path / "translation"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(train, "compiled_model", remember)
        patch.setattr(train, "step_batches", snapshot)
        command = ["train", "transformer", "--parallel", str(pairs), "--init", str(pretrained), "--objective", "translation", "--out", str(out)]
        assert main([*command, "--set", "model.max_steps=3", "--set", "model.checkpoint_every=3"]) == 0
    config = TransformerConfig(**read_toml(pretrained / "config.toml")["model"])
    reference = build_backbone(config)
    reference.load_weights(str(pretrained / "backbone.weights.h5"))
    assert len(at_start) == 1 and len(at_start[0]) == len(reference.get_weights()) > 10
    for loaded, expected in zip(at_start[0], reference.get_weights(), strict=True):
        np.testing.assert_array_equal(loaded, expected)
    assert (out / "tokenizer.json").read_text() == (pretrained / "tokenizer.json").read_text()
    stored = read_toml(out / "config.toml")["model"]
    assert stored["init"] == str(pretrained.resolve()) and stored["objective"] == "translation" and stored["hidden_dim"] == 32
    assert json.loads((out / "manifest.json").read_text())["init"] == str(pretrained.resolve())


def test_denoising_refusals(pairs_file: Path, corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = str(tmp_path / "run")
    cases = [
        (["--parallel", str(pairs_file), "--objective", "bart"],
         "error: config key 'model.objective' = 'bart' pre-trains on a --corpus; --parallel pairs train 'translation' (--objective translation)"),
        (["--corpus", str(corpus)],
         "error: config key 'model.objective' = 'translation' trains on --parallel pairs; pre-training on --corpus takes one of bart, t5_span, mass (--objective bart)"),
        (["--corpus", str(corpus), "--objective", "bart", "--set", "model.bart_noises=text_infilling,shuffle"],
         "error: --set: config key 'model.bart_noises': unknown noising 'shuffle'; expected some of sentence_permutation, text_infilling, token_masking, token_deletion, document_rotation"),
        (["--corpus", str(corpus), "--objective", "mass", "--set", "model.mass_ratio=1.5"], "error: --set: config key 'model.mass_ratio' must be in (0, 1), got 1.5"),
        (["--corpus", str(corpus), "--objective", "bart", "--dev", str(pairs_file)],
         "error: --dev: held-out pairs go with --parallel; the transformer family's --corpus runs take none"),
        (["--corpus", str(corpus), "--parallel", str(pairs_file)],
         "error: the transformer family trains on sentence pairs (--parallel FILE) or pre-trains on a text corpus (--corpus FILE): give one of them"),
        (["--corpus", str(corpus), "--objective", "bart,mass"],
         "error: --objective: the transformer family trains with its own objective; choose it with its [model] keys (ptmkit config transformer) "
         "and drop --objective (one objective: it sets model.objective)"),
        (["--corpus", str(corpus), "--objective", "mlm"],
         "error: --objective: config key 'model.objective' must be one of translation, bart, t5_span, mass, got 'mlm'"),
    ]
    for flags, message in cases:
        assert main(["train", "transformer", *flags, "--out", out, *_sets(["model.max_steps=1"])]) == 2, flags
        assert capsys.readouterr().err.strip() == message
        assert not Path(out).exists()


def test_interrupted_denoising_run_resumes_to_the_uninterrupted_weights(corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tiny = [*TINY, "model.max_steps=8", "model.checkpoint_every=4", "model.dropout=0.1", "model.bart_noises=text_infilling,token_deletion,document_rotation"]

    def argv(out: Path, *more: str) -> list[str]:
        return ["train", "transformer", "--corpus", str(corpus), "--objective", "bart", "--out", str(out), *_sets(tiny), *more]

    resume = ["train", "transformer", "--corpus", str(corpus), "--out", str(tmp_path / "cut"), "--resume"]  # the stored config
    check_resume_after_interrupt(argv, resume, tmp_path, monkeypatch)
