"""ONNX decoding with a key/value cache: ``ptmkit export`` of a pre-trained gpt run, the lean
runtime's ``Predictor.generate`` and ``ptmkit generate EXPORT_DIR``, against the Keras run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import nullcontext

import numpy as np
import pytest
from inplugins import in_tree_plugins  # noqa: F401 - the fixture

from ptmkit_export.generation import GenerationSettings, generate_ids

pytestmark = pytest.mark.usefixtures("in_tree_plugins")


def _prompts(corpus, count: int = 32) -> list[str]:
    """``count`` prompts of mixed length (1 to 12 words, and one empty) from the corpus."""
    lines = [line.split() for line in corpus.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [""] + [" ".join(lines[i % len(lines)][: 1 + (7 * i) % 12]) for i in range(count - 1)]


def test_export_is_a_cached_decoder_with_named_axes(gpt_export) -> None:
    _, out, predictor, generator = gpt_export
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["task"] == "generation" and manifest["decoder"]["layers"] == 2 and manifest["decoder"]["heads"] == 2
    assert manifest["variants"]["fp32"]["parity_max_abs_diff"] <= 1e-4
    shapes = {value.name: value.shape for value in predictor.session.get_inputs()}
    assert shapes["token_ids"] == ["batch", "sequence"] and shapes["padding_mask"] == ["batch", "total_sequence"]
    assert shapes["past_key_1"] == ["batch", 2, "past_sequence", 16] and shapes["past_value_0"] == ["batch", 2, "past_sequence", 16]
    outputs = {value.name: value.shape for value in predictor.session.get_outputs()}
    assert outputs["logits"] == ["batch", "sequence", generator.config.vocabulary_size]
    assert outputs["present_key_0"] == ["batch", 2, "total_sequence", 16]


def test_cached_next_token_logits_equal_full_recomputation(gpt_export) -> None:
    """Feeding a left-padded prefix, then one token at a time through the cache, gives the logits
    of recomputing the whole prefix: in ONNX without a cache and in Keras (within 1e-4)."""
    from ptmkit_gpt.onnx_export import keras_logits

    _, _, predictor, generator = gpt_export
    rng = np.random.default_rng(11)
    token_ids = rng.integers(0, generator.config.vocabulary_size, (5, 20)).astype(np.int32)
    mask = np.ones_like(token_ids)
    for row, pad in enumerate([0, 3, 7, 1, 9]):
        mask[row, :pad] = 0
    reference = keras_logits(generator, token_ids, mask)
    decoder = predictor.decoder
    decoder.reset()
    before = decoder.cached_steps
    for end in range(10, 21):
        cached = decoder.next_logits(token_ids[:, :end], mask[:, :end])
        recomputed = decoder.run(token_ids[:, :end], mask[:, :end])[0][:, -1]
        assert np.abs(cached - recomputed).max() <= 1e-4
        assert np.abs(cached - reference[:, end - 1]).max() <= 1e-4
    assert decoder.cached_steps - before == 10  # every step after the first came from the cache


@pytest.mark.parametrize("strategy", ["greedy", "sample", "beam"])
def test_tokens_identical_to_keras_batched_and_single(gpt_run, gpt_export, strategy: str) -> None:
    """32 prompts of mixed length: the export's tokens (one left-padded batch, and each prompt
    alone) are Keras' (the run's ``next_logits``, recomputing the prefix)."""
    _, corpus, _ = gpt_run
    _, _, predictor, generator = gpt_export
    prompts = generator.prompt_ids(_prompts(corpus))
    assert len(prompts) >= 30 and len({len(p) for p in prompts}) >= 8
    settings = GenerationSettings(max_new_tokens=10, strategy=strategy, temperature=1.0, num_beams=2, seed=5)
    chosen = prompts if strategy == "greedy" else prompts[:6]  # Keras recomputes the prefix per beam: a few prompts
    pad, eos, positions = generator.specials.padding_id, None, generator.max_length
    keras = generate_ids(generator.next_logits, chosen, settings, pad, eos, positions)
    batched = generate_ids(predictor.decoder.next_logits, chosen, settings, pad, eos, positions)
    single = [generate_ids(predictor.decoder.next_logits, [p], settings, pad, eos, positions)[0] for p in chosen]
    assert batched == keras
    assert single == keras if strategy != "sample" else single[0] == keras[0]  # a sample's row seed is its index
    assert len({tuple(row) for row in keras}) > 1


def test_generate_command_on_the_export_is_the_runs(gpt_run, gpt_export, capsys) -> None:
    from ptmkit.testing import main

    _, corpus, _ = gpt_run
    run, out, predictor, _ = gpt_export
    prompts = _prompts(corpus, 6)
    args = [arg for prompt in prompts for arg in ("--prompt", prompt)] + ["--max-new-tokens", "8", "--json"]
    assert main(["generate", str(run), *args]) == 0
    from_run = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert main(["generate", str(out), *args]) == 0
    from_export = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert from_export == from_run and len(from_run) == 6
    assert [row["text"] for row in from_export] == predictor.generate(prompts, max_new_tokens=8)
    assert main(["generate", str(out), "--prompt", "word " * 80]) == 2
    assert "--truncate left" in capsys.readouterr().err
    assert main(["export", str(run), "--out", str(out.parent / "int8"), "--optimize", "1"]) == 2
    assert "--optimize 1 on a decoder export needs --dev FILE" in capsys.readouterr().err
    assert main(["export", str(run), "--out", str(out.parent / "int8"), "--int8", "--int4", "--exact-gelu"]) == 2
    assert "--int4, --exact-gelu: not supported yet" in capsys.readouterr().err
    assert not (out.parent / "int8").exists()


def test_runtime_generation_never_imports_tensorflow(gpt_run, gpt_export) -> None:
    _, corpus, _ = gpt_run
    _, out, predictor, _ = gpt_export
    prompts = _prompts(corpus, 4)
    code = (
        "import json, sys\n"
        "from ptmkit_export import Predictor\n"
        f"texts = Predictor({str(out)!r}).generate({prompts!r}, max_new_tokens=6)\n"
        "heavy = sorted(m for m in ('tensorflow', 'keras', 'keras_hub', 'tf2onnx') if m in sys.modules)\n"
        "print(json.dumps({'texts': texts, 'heavy': heavy}))\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    env = {**os.environ, "PYTHONPATH": os.path.join(root, "export")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["heavy"] == []
    assert result["texts"] == predictor.generate(prompts, max_new_tokens=6)


@pytest.fixture(scope="module")
def gated_export(gpt_run, tmp_path_factory: pytest.TempPathFactory):
    """``(export_dir, manifest)`` of ``ptmkit export RUN --optimize 2 --int8 --fp16 --dev CORPUS``."""
    from ptmkit.testing import main

    run, corpus, _ = gpt_run
    out = tmp_path_factory.mktemp("gpt-gated") / "export"
    assert main(["export", str(run), "--out", str(out), "--optimize", "2", "--int8", "--fp16", "--dev", str(corpus)]) == 0
    return out, json.loads((out / "manifest.json").read_text())


def _recounted_agreement(out, variant: str, prompts: list[list[int]], new_tokens: int, pad_id: int) -> tuple[float, float]:
    """``(greedy-token agreement, identical continuations)`` of ``variant`` with fp32 through the
    lean runtime's decoders, in the gate's batches of 16."""
    from ptmkit_export import Predictor

    entry = json.loads((out / "manifest.json").read_text())["variants"][variant]
    with pytest.warns(RuntimeWarning, match="did not pass the export's gate") if not entry["ok"] else nullcontext():
        chosen = Predictor(out, variant=variant, threads=1)
    fp32 = Predictor(out, variant="fp32", threads=1)
    settings = GenerationSettings(max_new_tokens=new_tokens)
    rows = [
        [generate_ids(p.decoder.next_logits, prompts[s : s + 16], settings, pad_id, None) for s in range(0, len(prompts), 16)]
        for p in (fp32, chosen)
    ]
    reference, got = (sum(batches, []) for batches in rows)
    matched = sum(a == b for ref, row in zip(reference, got, strict=True) for a, b in zip(ref, row, strict=False))
    return matched / sum(map(len, reference)), float(np.mean([a == b for a, b in zip(reference, got, strict=True)]))


def test_int8_variant_is_gated_on_greedy_token_agreement(gpt_run, gpt_export, gated_export, tmp_path, capsys) -> None:
    """The manifest's agreement is what the two variants' greedy tokens give, recomputed here."""
    from ptmkit.testing import main
    from ptmkit_gpt.onnx_variants import AGREEMENT_THRESHOLD, gate_prompts

    run, corpus, _ = gpt_run
    _, _, _, generator = gpt_export
    out, manifest = gated_export
    assert main(["export", str(run), "--out", str(tmp_path / "int8"), "--int8"]) == 2
    assert "--int8 on a decoder export needs --dev FILE" in capsys.readouterr().err and not (tmp_path / "int8").exists()
    entry = manifest["variants"]["int8"]
    assert (out / "model.int8.onnx").stat().st_size < (out / "model.onnx").stat().st_size
    assert entry["quantization"]["mode"] == "dynamic" and entry["gate_prompts"] == 64
    assert entry["ok"] == (not entry["problems"]) and manifest["gate"]["int8"]["ok"] == entry["ok"]
    assert (entry["greedy_token_agreement_with_fp32"] >= AGREEMENT_THRESHOLD) == ("agreement" not in " ".join(entry["problems"]))
    agreement, identical = _recounted_agreement(out, "int8", gate_prompts(generator, corpus), entry["gate_new_tokens"], generator.specials.padding_id)
    assert entry["greedy_token_agreement_with_fp32"] == pytest.approx(agreement)
    assert entry["identical_continuations"] == pytest.approx(identical)


def test_optimized_variant_fuses_attention_with_its_cache(gpt_run, gpt_export, gated_export) -> None:
    """``--optimize 2``: one ``MultiHeadAttention`` per block, reading and writing the cache, plus
    ONNX Runtime's layer-norm and GELU fusions; its logits through the cache are fp32's (1e-4), its
    greedy tokens fp32's (the gate's recount), and the int8 variant was quantized from it."""
    import onnx
    import onnxruntime as ort

    from ptmkit_export.decoding import CachedDecoder
    from ptmkit_gpt.onnx_variants import gate_prompts

    _, corpus, _ = gpt_run
    _, _, _, generator = gpt_export
    out, manifest = gated_export
    entry, spec = manifest["variants"]["optimized"], manifest["decoder"]
    assert entry["file"] == "model.opt.onnx" and entry["optimization"]["level"] == 2
    ops = [node.op_type for node in onnx.load(str(out / "model.opt.onnx")).graph.node]
    assert ops.count("MultiHeadAttention") == spec["layers"] == 2 and "Softmax" not in ops and "Concat" not in ops
    assert ops.count("SkipLayerNormalization") >= 2 and ops.count("FastGelu") + ops.count("BiasGelu") + ops.count("Gelu") == 2 and "Tanh" not in ops
    assert entry["optimization"]["fused"]["MultiHeadAttention"] == 2 and entry["optimization"]["attention_fused"]
    token_ids = np.random.default_rng(5).integers(0, generator.config.vocabulary_size, (3, 14)).astype(np.int32)
    mask = np.ones_like(token_ids)
    mask[1, :4], mask[2, :9] = 0, 0
    decoders = [CachedDecoder(ort.InferenceSession(str(out / name)), spec["layers"], spec["heads"], spec["head_dim"]) for name in ("model.onnx", "model.opt.onnx")]
    for end in range(10, 15):  # a prefix, then one token at a time through each graph's own cache
        fp32, fused = (decoder.next_logits(token_ids[:, :end], mask[:, :end]) for decoder in decoders)
        assert np.abs(fp32 - fused).max() <= 1e-4
    assert decoders[1].cached_steps == 4
    agreement, identical = _recounted_agreement(out, "optimized", gate_prompts(generator, corpus), entry["gate_new_tokens"], generator.specials.padding_id)
    assert entry["greedy_token_agreement_with_fp32"] == pytest.approx(agreement) == 1.0 and identical == 1.0
    assert manifest["variants"]["int8"]["source"] == "model.opt.onnx" if entry["ok"] else "source" not in manifest["variants"]["int8"]
    assert not (out / "model.fused.onnx").exists()  # the unoptimised fused graph stays in the staging directory


def test_fp16_variant_is_gated_like_int8_and_never_the_cpu_default(gpt_run, gpt_export, gated_export, tmp_path, capsys) -> None:
    """``--int8 --fp16 --dev`` writes both; fp16 keeps a float32 cache at its edges, its manifest
    agreement is the lean runtime's recount, and a slower fp16 is marked not ok, naming why."""
    from ptmkit.testing import main
    from ptmkit_export import Predictor
    from ptmkit_export.predictor import default_variant
    from ptmkit_gpt.onnx_export import GATE_KEYS
    from ptmkit_gpt.onnx_variants import AGREEMENT_THRESHOLD, gate_prompts

    run, corpus, _ = gpt_run
    _, _, _, generator = gpt_export
    out, manifest = gated_export
    assert main(["export", str(run), "--out", str(tmp_path / "fp16"), "--fp16"]) == 2
    error = capsys.readouterr().err
    assert "--fp16 on a decoder export needs --dev FILE" in error and len(error.strip().splitlines()) == 1
    assert not (tmp_path / "fp16").exists()
    entry = manifest["variants"]["fp16"]
    assert entry["file"] == "model.fp16.onnx" and (out / "model.fp16.onnx").stat().st_size < (out / "model.onnx").stat().st_size
    assert set(manifest["gate"]) == {"optimized", "int8", "fp16"} and set(manifest["gate"]["fp16"]) == set(manifest["gate"]["int8"]) == set(GATE_KEYS)
    assert entry["conversion"]["io_dtype"] == "float32" and entry["gate_prompts"] == 64
    assert entry["ok"] == (not entry["problems"]) and manifest["gate"]["fp16"]["ok"] == entry["ok"]
    assert entry["agreement_ok"] == (entry["greedy_token_agreement_with_fp32"] >= AGREEMENT_THRESHOLD)
    slower = entry["latency_ms_per_token_b1"] > 1.05 * entry["fp32_paired_latency_ms_per_token_b1"]
    assert slower == any("slower than fp32" in problem for problem in entry["problems"])
    agreement, identical = _recounted_agreement(out, "fp16", gate_prompts(generator, corpus), entry["gate_new_tokens"], generator.specials.padding_id)
    assert entry["greedy_token_agreement_with_fp32"] == pytest.approx(agreement)
    assert entry["identical_continuations"] == pytest.approx(identical)
    assert default_variant(manifest) != "fp16" and Predictor(out).variant != "fp16"
    assert default_variant(manifest, "cuda") == ("fp16" if entry["agreement_ok"] else "fp32")
    import onnxruntime as ort

    session = ort.InferenceSession(str(out / "model.fp16.onnx"), providers=["CPUExecutionProvider"])
    edges = [*session.get_inputs(), *session.get_outputs()]
    assert {value.type for value in edges if value.name.startswith(("past_", "present_", "logits"))} == {"tensor(float)"}
    from ptmkit_export.decoding import CachedDecoder
    from ptmkit_gpt.onnx_graph import MASKED

    assert np.isfinite(np.float16(MASKED) - np.float16(1000))  # a masked score stays finite in float16
    spec = manifest["decoder"]
    token_ids = np.random.default_rng(3).integers(0, generator.config.vocabulary_size, (3, 12)).astype(np.int32)
    mask = np.ones_like(token_ids)
    mask[1, :5], mask[2, :10] = 0, 0  # left padding: its rows see no key
    fp32, half = (CachedDecoder(ort.InferenceSession(str(out / name)), spec["layers"], spec["heads"], spec["head_dim"]).run(token_ids, mask)
                  for name in ("model.onnx", "model.fp16.onnx"))
    assert all(np.isfinite(tensor).all() for tensor in half)  # padding rows too: their cached values reach no NaN
    assert np.abs(fp32[0] - half[0])[mask.astype(bool)].max() < 1e-2


def test_fp16_decodes_in_the_lean_runtime_without_tensorflow(gpt_run, gated_export) -> None:
    _, corpus, _ = gpt_run
    out, _ = gated_export
    prompts = _prompts(corpus, 4)
    code = (
        "import json, sys, warnings\n"
        "from ptmkit_export import Predictor\n"
        "warnings.simplefilter('ignore')\n"
        f"fp16 = Predictor({str(out)!r}, variant='fp16', threads=1)\n"
        "cache = sorted({v.type for v in fp16.session.get_inputs() if v.name.startswith('past_')})\n"
        f"texts = fp16.generate({prompts!r}, max_new_tokens=6)\n"
        f"reference = Predictor({str(out)!r}, variant='fp32', threads=1).generate({prompts!r}, max_new_tokens=6)\n"
        "heavy = sorted(m for m in ('tensorflow', 'keras', 'keras_hub', 'tf2onnx') if m in sys.modules)\n"
        "print(json.dumps({'texts': texts, 'reference': reference, 'cache': cache, 'heavy': heavy}))\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    env = {**os.environ, "PYTHONPATH": os.path.join(root, "export")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["heavy"] == [] and result["cache"] == ["tensor(float)"]
    assert len(result["texts"]) == 4 and all(isinstance(text, str) for text in result["texts"])
    agreeing = sum(a == b for a, b in zip(result["texts"], result["reference"], strict=True))
    assert agreeing >= 3  # the gate's agreement on this model is ~1: at most one prompt may diverge
