"""``ptmkit export`` of a pre-trained GPT run: the decoder with a key/value cache
(:mod:`ptmkit_gpt.onnx_graph`), checked against Keras, for the lean runtime's
``Predictor.generate`` and ``ptmkit generate EXPORT_DIR``.

The export directory holds ``model.onnx``, ``tokenizer.json`` and ``manifest.json`` (``task``
``generation``, a ``decoder`` object describing the cache; :mod:`ptmkit_export.decoding`), and with
``--optimize N --dev PROMPTS`` ``model.opt.onnx`` (fused attention with its cache at ``N`` >= 2),
with ``--int8 --dev PROMPTS`` ``model.int8.onnx`` and with ``--fp16 --dev PROMPTS`` ``model.fp16.onnx``,
each gated on greedy-token agreement with fp32 and per-token latency
(:mod:`ptmkit_gpt.onnx_variants`). It is
built in a staging directory beside the target and moved in only when the parity check passed.

Parity: on left-padded random batches, the logits of every real position with an empty cache,
and the next-token logits after feeding a prefix and then one token at a time through the cache,
against the Keras backbone recomputing the whole prefix: max abs difference <=
:data:`PARITY_TOLERANCE`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ptmkit.api import ExportError, atomic_write_json, staging_directory

PARITY_TOLERANCE = 1e-4
#: A variant gate's figures copied into the manifest's ``gate`` (and ``ptmkit export``'s summary).
GATE_KEYS = ("ok", "agreement_ok", "greedy_token_agreement_with_fp32", "identical_continuations", "latency_ms_per_token_b1", "fp32_paired_latency_ms_per_token_b1")
FORMAT = "ptmkit-export/1"
#: ``ptmkit export`` options this export does not honour yet, with the value meaning "not given".
UNSUPPORTED = {"static": False, "with_tokenizer": False, "calibration": None, "exclude_nodes": (), "int4": False,
               "fused_layer_norm": False, "exact_gelu": False}


def keras_logits(generator: Any, token_ids: np.ndarray, padding_mask: np.ndarray) -> np.ndarray:
    """``(batch, sequence, vocabulary)`` logits of the Keras backbone, recomputed over the prefix."""
    out = generator.backbone({"token_ids": token_ids, "padding_mask": padding_mask}, training=False)["sequence_output"]
    return np.asarray(out) @ generator._embeddings.T


def check_parity(generator: Any, session: Any, seed: int = 0) -> float:
    """The largest |ONNX - Keras| logit difference over the checks of the module docstring.

    Raises:
        ExportError: a difference above :data:`PARITY_TOLERANCE`.
    """
    from ptmkit_export.decoding import CachedDecoder

    config = generator.config
    decoder = CachedDecoder(session, config.num_layers, config.num_heads, config.hidden_dim // config.num_heads)
    rng = np.random.default_rng(seed)
    worst = 0.0
    for batch, length in ((1, 7), (3, 12), (4, 5)):
        token_ids = rng.integers(0, config.vocabulary_size, (batch, length)).astype(np.int32)
        mask = np.ones_like(token_ids)
        for row in range(1, batch):
            mask[row, : rng.integers(1, length - 3)] = 0  # left padding, every prefix checked ends on a token
        reference = keras_logits(generator, token_ids, mask)
        full = decoder.run(token_ids, mask)[0]
        worst = max(worst, float(np.abs(full - reference)[mask.astype(bool)].max()))
        decoder.reset()
        for end in range(length - 3, length + 1):  # a prefix, then one token at a time through the cache
            worst = max(worst, float(np.abs(decoder.next_logits(token_ids[:, :end], mask[:, :end]) - reference[:, end - 1]).max()))
        if decoder.cached_steps < 3:
            raise ExportError("the key/value cache was not used in the parity check (a bug)")
    if worst > PARITY_TOLERANCE:
        raise ExportError(f"ONNX decoder differs from Keras by {worst:.2e} > {PARITY_TOLERANCE:g} in logits; nothing written")
    return worst


def decoder_manifest(generator: Any, run_dir: Path, parity: float) -> dict[str, Any]:
    """The manifest of a generation export (:mod:`ptmkit_export.decoding`)."""
    config = generator.config
    return {
        "format": FORMAT,
        "family": generator.family.name,
        "task": "generation",
        "run": str(Path(run_dir).resolve()),
        "inputs": [
            {"name": "token_ids", "dtype": "int32", "encoding": "ids", "shape": ["batch", "sequence"]},
            {"name": "padding_mask", "dtype": "int32", "encoding": "attention_mask", "shape": ["batch", "total_sequence"]},
        ],
        "outputs": [{"name": "logits", "shape": ["batch", "sequence", config.vocabulary_size]}],
        "labels": [],
        "decoder": {
            "layers": config.num_layers, "heads": config.num_heads, "head_dim": config.hidden_dim // config.num_heads,
            "past": "past_{key,value}_{layer}", "present": "present_{key,value}_{layer}",
            "bos_token_id": int(generator.specials["bos"]), "eos_token_id": int(generator.specials["eos"]),
            "prepend_bos": bool(config.prepend_bos),
        },
        "max_sequence_length": int(generator.max_length),
        "pad_token_id": int(generator.specials.padding_id),
        "tokenizer": "tokenizer.json",
        "variants": {"fp32": {"file": "model.onnx", "ok": True, "parity_max_abs_diff": parity}},
        "gate": {},
    }


def _add_variants(tmp: Path, manifest: dict[str, Any], wanted: list[str], prompts: list[list[int]], options: dict[str, Any], console: Any) -> None:
    """Build and gate each of ``wanted`` (keys of :data:`ptmkit_gpt.onnx_variants.VARIANTS`, in
    that order) into ``tmp``, adding its entry to ``manifest["variants"]`` and its figures
    (:data:`GATE_KEYS`) to ``manifest["gate"]``; prints one line per variant. Each is gated against
    ``tmp / "model.onnx"``; ``optimized`` is built from ``tmp / "model.fused.onnx"`` when that
    exists (``--optimize 2-3``), ``int8`` from ``model.opt.onnx`` when it was built and passed its
    gate, everything else from ``model.onnx``."""
    from ptmkit_gpt.onnx_variants import VARIANTS, gate_variant

    for name in wanted:
        file, build = VARIANTS[name]
        source = tmp / "model.onnx"
        if name == "optimized" and (tmp / "model.fused.onnx").exists():
            source = tmp / "model.fused.onnx"
        elif name == "int8" and manifest["variants"].get("optimized", {}).get("ok"):
            source = tmp / VARIANTS["optimized"][0]
        with console.status(f"building and gating the {name} variant"):
            built = build(source, tmp / file, options) | ({"source": source.name} if source.name != "model.onnx" else {})
            entry = gate_variant(tmp / "model.onnx", tmp / file, manifest["decoder"], prompts, manifest["pad_token_id"], built)
        manifest["variants"][name] = entry
        manifest["gate"][name] = {key: entry[key] for key in GATE_KEYS}
        verdict = "ok" if entry["ok"] else "not ok (" + "; ".join(entry["problems"]) + "): the runtime does not pick it by default"
        console.print(f"{name}: greedy-token agreement with fp32 {entry['greedy_token_agreement_with_fp32']:.4f}, "
                      f"{entry['latency_ms_per_token_b1']:.3f} vs {entry['fp32_paired_latency_ms_per_token_b1']:.3f} ms/token: {verdict}")


def export_decoder(run_dir: Path, out: Path, options: dict[str, Any], console: Any) -> dict[str, Any]:
    """Write the generation export of a pre-trained GPT run into ``out``; see the module docstring.

    Returns:
        the manifest, with ``directory`` and ``summary``.

    Raises:
        ExportError: an option not supported yet (``--static``, ``--with-tokenizer``,
            ``--exclude-nodes``, ...); ``--optimize``, ``--int8`` or ``--fp16`` without ``--dev``
            (or the reverse); the parity check failed (nothing written).
        DataError: a ``--dev`` file that is missing, not UTF-8 or empty.
        RunDirError: not a finished pre-training run.
    """
    import onnxruntime as ort

    from ptmkit_gpt.generate import TextGenerator
    from ptmkit_gpt.onnx_graph import build_decoder_graph
    from ptmkit_gpt.onnx_variants import VARIANTS, gate_prompts

    given = [f"--{name.replace('_', '-')}" for name, default in UNSUPPORTED.items() if options.get(name, default) not in (default, None)]
    if given:
        raise ExportError(f"{', '.join(given)}: not supported yet for a decoder export (key/value cache: fp32, --optimize, --int8 dynamic and --fp16)")
    level = int(options.get("optimize") or 0)
    wanted = [name for name in VARIANTS if options.get(name) or (name == "optimized" and level > 0)]
    dev = options.get("dev")
    if wanted and dev is None:
        flags = " ".join(f"--optimize {level}" if name == "optimized" else f"--{name}" for name in wanted)
        raise ExportError(f"{flags} on a decoder export needs --dev FILE (prompts, one a line, for its greedy-token gate)")
    if dev is not None and not wanted:
        raise ExportError("--dev on a decoder export needs --optimize, --int8 or --fp16 (the variants its prompts gate)")
    generator = TextGenerator(run_dir)
    prompts = gate_prompts(generator, Path(dev)) if dev is not None else []
    model = build_decoder_graph(generator.backbone)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    parity = check_parity(generator, session)
    console.print(f"decoder with key/value cache: ONNX vs Keras max |diff| {parity:.2e} (<= {PARITY_TOLERANCE:g})")
    manifest = decoder_manifest(generator, run_dir, parity)
    with staging_directory(out, ".export-") as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "model.onnx").write_bytes(model.SerializeToString())
        if level >= 2:
            (tmp / "model.fused.onnx").write_bytes(build_decoder_graph(generator.backbone, fused_attention=True).SerializeToString())
        config = generator.config
        _add_variants(tmp, manifest, wanted, prompts, options | {"num_heads": config.num_heads, "hidden_size": config.hidden_dim}, console)
        (tmp / "tokenizer.json").write_bytes((Path(run_dir) / "tokenizer.json").read_bytes())
        atomic_write_json(tmp / "manifest.json", manifest)
        out.mkdir(parents=True, exist_ok=True)
        (out / "manifest.json").unlink(missing_ok=True)  # not a valid export while files are swapped
        for file, _ in VARIANTS.values():
            (out / file).unlink(missing_ok=True)  # an earlier export's variants
        for name in [entry["file"] for entry in manifest["variants"].values()] + ["tokenizer.json", "manifest.json"]:
            os.replace(tmp / name, out / name)
    summary = {"parity_max_abs_diff": parity} | {f"{name}_{key}": value for name, gate in manifest["gate"].items() for key, value in gate.items()}
    return {**manifest, "directory": str(out), "summary": summary}
