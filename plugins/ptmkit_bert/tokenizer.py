"""WordPiece tokenization for BERT: the core's WordPiece (:func:`ptmkit.api.train_wordpiece`,
:func:`ptmkit.api.wordpiece_special_tokens`), which every WordPiece family shares.

The trained ``tokenizer.json`` carries BERT's normaliser (clean text, CJK spacing, and
lower-casing plus accent stripping only for an uncased vocabulary), BERT's pre-tokeniser, the
WordPiece model and a post-processor that adds ``[CLS] A [SEP] (B [SEP])`` with segment ids 0/1,
so that any runtime holding the file (``ptmkit_export`` included) encodes exactly like training.
"""

from __future__ import annotations

from ptmkit.api import WORDPIECE_SPECIALS as SPECIALS
from ptmkit.api import train_wordpiece
from ptmkit.api import wordpiece_special_tokens as special_tokens

__all__ = ["SPECIALS", "special_tokens", "train_wordpiece"]
