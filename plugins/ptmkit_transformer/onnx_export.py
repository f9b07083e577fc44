"""``ptmkit export`` of a Transformer run: the encoder and the decoder with a key/value cache
(:mod:`ptmkit_transformer.onnx_graph`), checked against Keras, for the lean runtime's
:class:`ptmkit_export.Translator` and ``ptmkit translate EXPORT_DIR``.

The export directory holds ``encoder.onnx``, ``decoder.onnx``, ``tokenizer.json`` and
``manifest.json`` (``task`` ``translation``; :mod:`ptmkit_export.translation`), and with ``--int8
--dev PAIRS.tsv`` the int8 pair gated on dev BLEU (:mod:`ptmkit_transformer.onnx_variants`). It is built in a
staging directory beside the target and moved in only when the parity check passed.

Parity: on random right-padded sources, the encoder's states of every real position, and the
decoder's next-token logits after feeding a target prefix and then one token at a time through the
cache, against the Keras backbone recomputing the whole prefix: max abs difference <=
:data:`PARITY_TOLERANCE`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ptmkit.api import ExportError, atomic_write_json, staging_directory

PARITY_TOLERANCE = 1e-4
FORMAT = "ptmkit-export/1"
#: ``ptmkit export`` options a translation export does not honour yet, with the value meaning "not given".
UNSUPPORTED = {"static": False, "with_tokenizer": False, "calibration": None, "exclude_nodes": (), "int4": False, "fused_layer_norm": False,
               "exact_gelu": False, "fp16": False, "optimize": None}
#: Every file an export may hold (an earlier export's are replaced or removed).
FILES = ("encoder.onnx", "decoder.onnx", "encoder.int8.onnx", "decoder.int8.onnx", "tokenizer.json", "manifest.json")


def check_parity(translator: Any, encoder: Any, decoder: Any, seed: int = 0) -> float:
    """The largest |ONNX - Keras| difference over the checks of the module docstring.

    Args:
        translator: a :class:`ptmkit_transformer.translate.Translator` (Keras).
        encoder: an ONNX Runtime session of the encoder graph.
        decoder: one of the decoder graph.

    Raises:
        ExportError: a difference above :data:`PARITY_TOLERANCE`, or a cache never used (a bug).
    """
    from ptmkit_export.decoding import CachedDecoder

    config = translator.config
    cached = CachedDecoder(decoder, config.decoder_layers, config.num_heads, config.hidden_dim // config.num_heads)
    rng = np.random.default_rng(seed)
    worst = 0.0
    for batch, source, target in ((1, 5, 6), (3, 11, 9), (2, 16, 4)):
        lengths = [source] + list(rng.integers(2, source + 1, batch - 1))
        ids = [list(rng.integers(4, config.vocabulary_size, n)) for n in lengths]
        source_ids, mask = _pack(ids, translator)
        states = translator.encoder_states(source_ids, mask)
        onnx_states = encoder.run(["encoder_sequence_output"], {"encoder_token_ids": source_ids, "encoder_padding_mask": mask})[0]
        worst = max(worst, float(np.abs(onnx_states - states)[mask.astype(bool)].max()))
        target_ids = np.concatenate([np.full((batch, 1), translator.bos), rng.integers(4, config.vocabulary_size, (batch, target - 1))], axis=1).astype(np.int32)
        reference = translator.next_logits_over(states, mask)
        cached.reset()
        cached.context = {"encoder_sequence_output": states, "encoder_padding_mask": mask}
        for end in range(target - 3, target + 1):  # a prefix, then one token at a time through the cache
            prefix = target_ids[:, :end]
            worst = max(worst, float(np.abs(cached.next_logits(prefix, np.ones_like(prefix)) - reference(prefix, np.ones_like(prefix))).max()))
        if cached.cached_steps < 3:
            raise ExportError("the key/value cache was not used in the parity check (a bug)")
    if worst > PARITY_TOLERANCE:
        raise ExportError(f"ONNX encoder-decoder differs from Keras by {worst:.2e} > {PARITY_TOLERANCE:g}; nothing written")
    return worst


def _pack(ids: list[list[int]], translator: Any) -> tuple[np.ndarray, np.ndarray]:
    from ptmkit_export.translation import pack_sources

    return pack_sources(ids, translator.eos, translator.pad, translator.max_sequence_length, translator.source_prefix)


def translation_manifest(translator: Any, run_dir: Path, parity: float) -> dict[str, Any]:
    """The manifest of a translation export (:mod:`ptmkit_export.translation`)."""
    config = translator.config
    return {
        "format": FORMAT,
        "family": "transformer",
        "task": "translation",
        "run": str(Path(run_dir).resolve()),
        "languages": translator.languages,
        "inputs": [
            {"name": "encoder_token_ids", "dtype": "int32", "encoding": "ids", "shape": ["batch", "source"]},
            {"name": "encoder_padding_mask", "dtype": "int32", "encoding": "attention_mask", "shape": ["batch", "source"]},
        ],
        "outputs": [{"name": "logits", "shape": ["batch", "sequence", config.vocabulary_size]}],
        "labels": [],
        "decoder": {
            "layers": config.decoder_layers, "heads": config.num_heads, "head_dim": config.hidden_dim // config.num_heads,
            "past": "past_{key,value}_{layer}", "present": "present_{key,value}_{layer}",
            "bos_token_id": int(translator.bos), "eos_token_id": int(translator.eos), "prepend_bos": True,
        },
        "max_sequence_length": int(config.max_sequence_length),
        "source_prefix_ids": [int(i) for i in translator.source_prefix],
        "pad_token_id": int(translator.pad),
        "tokenizer": "tokenizer.json",
        "variants": {"fp32": {"file": "decoder.onnx", "encoder": "encoder.onnx", "ok": True, "parity_max_abs_diff": parity}},
        "gate": {},
    }


def export_translation(run_dir: Path, out: Path, options: dict[str, Any], console: Any) -> dict[str, Any]:
    """Write the translation export of a Transformer run into ``out``; see the module docstring.

    Returns:
        the manifest, with ``directory`` and ``summary``.

    With ``--int8 --dev PAIRS.tsv`` it also writes ``encoder.int8.onnx`` and ``decoder.int8.onnx``,
    gated on dev BLEU (:mod:`ptmkit_transformer.onnx_variants`).

    Raises:
        ExportError: an option not supported yet for this export (``--fp16``, ``--optimize``,
            ``--static``, ...); ``--int8`` without ``--dev`` or the reverse; the parity check
            failed (nothing written).
        DataError: an unreadable ``--dev`` file (read before anything is converted).
        RunDirError: not a finished Transformer run.
    """
    import onnxruntime as ort

    from ptmkit_transformer.onnx_graph import build_decoder_graph, build_encoder_graph
    from ptmkit_transformer.onnx_variants import add_int8, check_variant_options, read_gate_pairs
    from ptmkit_transformer.translate import Translator

    given = [f"--{name.replace('_', '-')}" for name, default in UNSUPPORTED.items() if options.get(name, default) not in (default, None, 0)]
    if given:
        raise ExportError(f"{', '.join(given)}: not supported yet for a translation export (fp32 encoder and decoder with a key/value cache, --int8 dynamic)")
    dev = check_variant_options(options)
    translator = Translator(run_dir)
    pairs = read_gate_pairs(dev, translator.languages) if dev is not None else None  # before the slow conversion
    graphs = {"encoder.onnx": build_encoder_graph(translator.backbone, translator.config), "decoder.onnx": build_decoder_graph(translator.backbone, translator.config)}
    encoder, decoder = (ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]) for m in graphs.values())
    parity = check_parity(translator, encoder, decoder)
    console.print(f"encoder, and decoder with key/value cache: ONNX vs Keras max |diff| {parity:.2e} (<= {PARITY_TOLERANCE:g})")
    manifest = translation_manifest(translator, run_dir, parity)
    with staging_directory(out, ".export-") as tmp_name:
        tmp = Path(tmp_name)
        for file, model in graphs.items():
            (tmp / file).write_bytes(model.SerializeToString())
        (tmp / "tokenizer.json").write_bytes((Path(run_dir) / "tokenizer.json").read_bytes())
        atomic_write_json(tmp / "manifest.json", manifest)
        if pairs is not None:
            add_int8(tmp, manifest, pairs, console)
        out.mkdir(parents=True, exist_ok=True)
        (out / "manifest.json").unlink(missing_ok=True)  # not a valid export while files are swapped
        for name in FILES:
            if (tmp / name).exists():
                os.replace(tmp / name, out / name)
            else:
                (out / name).unlink(missing_ok=True)  # an earlier export's variant
    summary = {"parity_max_abs_diff": parity} | {f"{name}_{key}": value for name, gate in manifest["gate"].items() for key, value in gate.items()}
    return {**manifest, "directory": str(out), "summary": summary}
