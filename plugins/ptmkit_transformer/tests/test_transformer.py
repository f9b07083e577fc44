"""The transformer family: the paper's schedule and label-smoothed loss against their formulas, a
tiny model that learns 20 real pairs by heart (greedy and 1-beam search give them back), BLEU and
chrF against sacrebleu's rules, and the one-line refusals of bad input."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from inplugins import in_tree_plugins  # noqa: F401 - the fixture
from transformer_pairs import check_resume_after_interrupt, short_pairs, write_pairs

from ptmkit.testing import main

pytestmark = pytest.mark.usefixtures("in_tree_plugins")


def test_schedule_is_the_papers_equation_3() -> None:
    from ptmkit_transformer.objectives import inverse_sqrt_schedule

    d_model, warmup, scale = 512, 4000, 2.0
    schedule = inverse_sqrt_schedule(d_model, warmup, scale)
    for step in (0, 1, 999, 3998, 3999, 4000, 9999, 99999):
        n = step + 1  # Keras counts steps from 0, the paper's step_num from 1
        expected = scale * d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)
        assert float(schedule(step)) == pytest.approx(expected, rel=1e-6), step
    peak = float(schedule(warmup - 1))
    assert peak == pytest.approx(scale * (d_model * warmup) ** -0.5, rel=1e-6)  # the top, at step_num = warmup
    assert float(schedule(warmup - 2)) < peak and float(schedule(warmup)) < peak


def test_label_smoothed_loss_by_hand() -> None:
    import keras

    from ptmkit_transformer.objectives import label_smoothed_nll

    logits = np.array([[[2.0, 0.5, -1.0, 0.0], [0.1, 0.2, 0.3, 3.0]]], np.float32)
    labels = np.array([[0, 2]], np.int32)
    eps, vocabulary = 0.1, 4
    expected = []
    for row, label in zip(logits[0], labels[0], strict=True):
        log_p = row - math.log(sum(math.exp(v) for v in row))
        target = [(1 - eps) * (v == label) + eps / vocabulary for v in range(vocabulary)]  # (1 - eps) one-hot + eps / V
        expected.append(-sum(q * lp for q, lp in zip(target, log_p, strict=True)))
    got = np.asarray(label_smoothed_nll(labels, logits, eps))[0]
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    keras_rule = keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=eps, reduction=None)
    np.testing.assert_allclose(got, np.asarray(keras_rule(np.eye(vocabulary)[labels[0]][None], logits))[0], rtol=1e-5)
    np.testing.assert_allclose(np.asarray(label_smoothed_nll(labels, logits, 0.0))[0], [-(r[k] - math.log(np.exp(r).sum())) for r, k in zip(logits[0], labels[0], strict=True)], rtol=1e-6)


def test_pairs_are_packed_for_teacher_forcing() -> None:
    from ptmkit_transformer.objectives import pack_pairs

    inputs, labels, weights = pack_pairs([[7, 8, 9], [5]], [[11, 12], [13, 14, 15, 16]], bos=2, eos=3, pad=0, limit=32)
    assert inputs["encoder_token_ids"][:, :5].tolist() == [[7, 8, 9, 3, 0], [5, 3, 0, 0, 0]]
    assert inputs["decoder_token_ids"][:, :6].tolist() == [[2, 11, 12, 0, 0, 0], [2, 13, 14, 15, 16, 0]]
    assert labels[:, :6].tolist() == [[11, 12, 3, 0, 0, 0], [13, 14, 15, 16, 3, 0]]
    assert weights.sum(axis=1).tolist() == [3.0, 5.0] and inputs["decoder_token_ids"].shape[1] % 8 == 0


def test_tiny_model_learns_20_pairs_and_greedy_translation_gives_them_back(overfit_run) -> None:
    from ptmkit_transformer.translate import Translator

    run, metrics = overfit_run
    pairs = short_pairs()
    translations = Translator(run).translate([source for source, _ in pairs])
    assert translations == [target for _, target in pairs]
    assert metrics["dev_bleu"] == 100.0 and metrics["dev_loss"] < 1.0 and metrics["languages"] == "en-de"
    assert metrics["train_pairs"] == 20 and not list((run / "checkpoints").glob("ckpt-*.npz"))[1:]


def test_one_beam_is_greedy(overfit_run) -> None:
    from ptmkit_export.generation import GenerationSettings, generate_ids
    from ptmkit_transformer.translate import Translator

    translator = Translator(overfit_run[0])
    sources = [source for source, _ in short_pairs()] + ["unable to read the file", "Sign Language of Finland"]
    greedy = translator.translate_ids(sources)
    states, mask, _ = translator.encode_sources(sources)
    settings = GenerationSettings(max_new_tokens=31, strategy="beam", num_beams=1, length_penalty=0.0)
    beam = [
        generate_ids(translator.next_logits_over(states[i : i + 1], mask[i : i + 1]), [[translator.bos]], settings, translator.pad, translator.eos, 32)[0]
        for i in range(len(sources))
    ]
    assert beam == greedy
    assert translator.translate(sources[:3], num_beams=4) == [target for _, target in short_pairs()[:3]]


def test_translate_and_evaluate_commands(overfit_run, pairs_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run, _ = overfit_run
    source, target = short_pairs()[0]
    assert main(["translate", str(run), "--text", source, "--num-beams", "2"]) == 0
    assert capsys.readouterr().out.strip() == target
    assert main(["evaluate", str(run), "--parallel", str(pairs_file)]) == 0
    out = capsys.readouterr().out
    assert "BLEU 100.00  nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:" in out
    assert "chrF 100.00  nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:" in out


def test_bleu_against_itself_and_by_hand() -> None:
    from ptmkit_transformer.translate import score_translations

    references = [target for _, target in short_pairs()]
    same = score_translations(references, references)
    assert same["bleu"] == 100.0 and same["chrf"] == 100.0
    # Modified n-gram precisions 5/6, 3/5, 2/4, 1/3, equal lengths (brevity penalty 1):
    # BLEU = (5/6 * 3/5 * 1/2 * 1/3) ** (1/4) = 53.73 (Papineni et al. 2002, equation on p. 315).
    one = score_translations(["the cat sat on the mat"], ["the cat sat on a mat"])
    assert one["bleu"] == round(100 * (5 / 6 * 3 / 5 * 1 / 2 * 1 / 3) ** 0.25, 2) == 53.73


def test_bad_input_is_one_line_exit_2(tmp_path: Path, pairs_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.tsv"
    bad.write_text("en\tde\nHello world\tHallo Welt\nno target column here\n", encoding="utf-8")
    run = tmp_path / "run"
    assert main(["train", "transformer", "--parallel", str(bad), "--out", str(run)]) == 2
    err = capsys.readouterr().err
    assert f"error: {bad}:3: no tab" in err and len(err.strip().splitlines()) == 1
    assert not run.exists()
    other = write_pairs(tmp_path / "en-fr.tsv", [("Hello world", "Bonjour le monde")], header="en\tfr")
    assert main(["train", "transformer", "--parallel", str(pairs_file), "--dev", str(other), "--out", str(run)]) == 2
    assert f"{other}:1: a en-fr file, but the run translates en-de" in capsys.readouterr().err
    assert not run.exists()
    assert main(["train", "transformer", "--corpus", str(pairs_file), "--out", str(run)]) == 2  # translation needs pairs
    assert "trains on --parallel pairs; pre-training on --corpus takes one of bart, t5_span, mass" in capsys.readouterr().err


def test_long_sources_are_cut_with_a_count_in_a_warning(tmp_path: Path, pairs_file: Path) -> None:
    """Sources longer than ``max_sequence_length - 1`` tokens are cut, and the warning counts them
    (one step of a tiny model with room for 5 source tokens)."""
    from transformer_pairs import TINY_TRANSFORMER

    from ptmkit.api import read_parallel
    from ptmkit_transformer.data import encode

    sets = [*TINY_TRANSFORMER, "model.max_sequence_length=6", "model.max_steps=1", "model.dev_sentences=0"]
    with pytest.warns(UserWarning, match=r"source\(s\) longer than 5 tokens \(model.max_sequence_length less </s>\) cut") as caught:
        assert main(["train", "transformer", "--parallel", str(pairs_file), "--out", str(tmp_path / "run"), *(a for s in sets for a in ("--set", s))]) == 0
    from ptmkit.api import RunDir

    tokenizer = RunDir(tmp_path / "run").load_tokenizer()
    longer = sum(len(ids) > 5 for ids in encode(tokenizer, read_parallel(pairs_file).sources))
    assert longer > 0 and any(str(w.message).startswith(f"{pairs_file}: {longer:,} source(s)") for w in caught)


def test_translate_refusals(overfit_run, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run, _ = overfit_run
    assert main(["translate", str(run), "--text", "hello", "--num-beams", "0"]) == 2
    assert "error: --num-beams 0: must be from 1 to 64" in capsys.readouterr().err
    assert main(["translate", str(run), "--text", "hello", "--num-beams", "65"]) == 2  # each beam holds a cache: bounded
    assert "error: --num-beams 65: must be from 1 to 64" in capsys.readouterr().err
    assert main(["translate", str(run)]) == 2
    assert "nothing to translate" in capsys.readouterr().err
    assert main(["translate", str(run), "--text", "hello", "--num-beams", "2", "--length-penalty", "nan"]) == 2
    assert "error: --length-penalty nan: must be a finite number" in capsys.readouterr().err
    blank = tmp_path / "blank.txt"
    blank.write_text("\n \n", encoding="utf-8")
    assert main(["translate", str(run), "--file", str(blank)]) == 2
    assert f"error: {blank}: no text in it (the file is empty or holds blank lines only)" in capsys.readouterr().err
    classifier = tmp_path / "classifier"
    classifier.mkdir()
    (classifier / "manifest.json").write_text('{"family": "bert", "stage": "finetune", "format": "ptmkit-run/1"}')
    assert main(["translate", str(classifier), "--text", "hello"]) == 2
    assert "a bert run (stage 'finetune') does not translate" in capsys.readouterr().err
    assert main(["embed", str(run), "--text", "hello"]) == 2  # an encoder-decoder has no sentence embeddings: refused before TensorFlow loads
    err = capsys.readouterr().err
    assert err == (f"error: {run}: a transformer run has no sentence embeddings (its backbone gives encoder_sequence_output, "
                   "decoder_sequence_output, no sequence_output to pool into one)\n"), err


def test_translate_file_keeps_line_for_line_alignment(overfit_run, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A blank line gives a blank line, a Windows editor's byte-order mark and CRLF are not text,
    ``-`` reads standard input."""
    import io

    run, _ = overfit_run
    (first, first_target), (second, second_target) = short_pairs()[:2]
    sources = tmp_path / "sources.txt"
    sources.write_bytes(b"\xef\xbb\xbf" + f"{first}\r\n\r\n{second}\r\n".encode())
    assert main(["translate", str(run), "--file", str(sources)]) == 0
    assert capsys.readouterr().out.split("\n") == [first_target, "", second_target, ""]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(f"{second}\n".encode())))
        assert main(["translate", str(run), "--file", "-", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"source": second, "translation": second_target}


def test_interrupted_run_resumes_to_the_uninterrupted_weights(pairs_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tiny = ["model.vocabulary_size=300", "model.min_frequency=1", "model.encoder_layers=1", "model.decoder_layers=1", "model.hidden_dim=16",
            "model.num_heads=2", "model.intermediate_dim=32", "model.max_sequence_length=32", "model.batch_size=8", "model.max_steps=10",
            "model.warmup_steps=4", "model.checkpoint_every=4", "model.dev_sentences=0", "model.dropout=0.1"]

    def argv(out: Path, *more: str) -> list[str]:
        return ["train", "transformer", "--parallel", str(pairs_file), "--out", str(out), *(a for item in tiny for a in ("--set", item)), *more]

    check_resume_after_interrupt(argv, argv(tmp_path / "cut", "--resume"), tmp_path, monkeypatch)


@pytest.mark.parametrize(("positions", "normalization"), [("sinusoidal", "post"), ("learned", "pre")])
def test_backbone_ties_its_embeddings_and_masks_padding(positions: str, normalization: str) -> None:
    import keras

    from ptmkit_transformer.backbone import build_backbone
    from ptmkit_transformer.config import TransformerConfig

    keras.utils.set_random_seed(0)
    config = TransformerConfig(vocabulary_size=50, encoder_layers=2, decoder_layers=1, hidden_dim=16, num_heads=2, intermediate_dim=32,
                               dropout=0.0, positions=positions, normalization=normalization, max_sequence_length=12)
    backbone = build_backbone(config)
    embeddings = [w for w in backbone.weights if "embeddings" in w.path and "token_embedding" in w.path]
    assert len(embeddings) == 1 and tuple(embeddings[0].shape) == (50, 16)  # one matrix: encoder, decoder and output
    assert len([w for w in backbone.weights if "position_embedding" in w.path]) == (2 if positions == "learned" else 0)
    assert len([w for w in backbone.weights if "final_layer_norm" in w.path]) == (4 if normalization == "pre" else 0)
    source = np.array([[5, 6, 7, 3, 0, 0], [8, 3, 0, 0, 0, 0]], np.int32)
    target = np.array([[2, 9, 10], [2, 11, 0]], np.int32)
    feeds = {"encoder_token_ids": source, "encoder_padding_mask": (source > 0).astype(np.int32),
             "decoder_token_ids": target, "decoder_padding_mask": (target > 0).astype(np.int32)}
    out = backbone(feeds)
    states = np.asarray(backbone.encoder([source, feeds["encoder_padding_mask"]]))
    logits = np.asarray(backbone.decoder([target, feeds["decoder_padding_mask"], states, feeds["encoder_padding_mask"]]))
    np.testing.assert_allclose(logits, np.asarray(out["decoder_sequence_output"]) @ np.asarray(embeddings[0]).T, atol=1e-5)
    repadded = dict(feeds, encoder_token_ids=np.where(source > 0, source, 17))  # other ids on padding change nothing
    np.testing.assert_allclose(np.asarray(backbone(repadded)["decoder_sequence_output"]), np.asarray(out["decoder_sequence_output"]), atol=1e-5)
    causal = dict(feeds, decoder_token_ids=np.array([[2, 9, 44], [2, 11, 0]], np.int32))  # a later token leaves earlier positions alone
    np.testing.assert_allclose(np.asarray(backbone(causal)["decoder_sequence_output"])[0, :2], np.asarray(out["decoder_sequence_output"])[0, :2], atol=1e-5)
