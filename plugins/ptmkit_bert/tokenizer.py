"""WordPiece tokenization for BERT with Hugging Face ``tokenizers``.

The trained ``tokenizer.json`` carries the normaliser (BERT's: clean text, CJK spacing, and
lower-casing plus accent stripping only for an uncased vocabulary), BERT's pre-tokeniser, the
WordPiece model and a post-processor that adds ``[CLS] A [SEP] (B [SEP])`` with segment ids 0/1,
so that any runtime holding the file (``ptmkit_export`` included) encodes exactly like training.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ptmkit.contract import SpecialTokens
from ptmkit.errors import DataError

SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def train_wordpiece(texts: Iterable[str], vocabulary_size: int, lowercase: bool, min_frequency: int = 2) -> Any:
    """Train a WordPiece vocabulary of at most ``vocabulary_size`` entries on streamed ``texts``.

    Raises:
        DataError: the texts produced no token (e.g. only whitespace or control characters).
    """
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=lowercase, lowercase=lowercase
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocabulary_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIALS),
        continuing_subword_prefix="##",
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    if tokenizer.get_vocab_size() <= len(SPECIALS):
        raise DataError("the corpus gave no token to build a vocabulary from (only whitespace or control characters?)")
    # The trainer numbers tokens in hash-map order, which changes from process to process; a
    # WordPiece vocabulary's ids carry no meaning, so renumber them (specials first, then sorted)
    # to make the same corpus give the same tokenizer, and the same seed the same run.
    learned = sorted(token for token in tokenizer.get_vocab() if token not in SPECIALS)
    vocab = {token: i for i, token in enumerate([*SPECIALS, *learned])}
    tokenizer.model = models.WordPiece(vocab=vocab, unk_token="[UNK]", max_input_chars_per_word=100, continuing_subword_prefix="##")
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    return tokenizer


def special_tokens(tokenizer: Any) -> SpecialTokens:
    """Ids of BERT's special tokens in ``tokenizer``.

    Raises:
        DataError: a special token is missing from the vocabulary.
    """
    ids = {}
    for role, token in zip(("pad", "unk", "cls", "sep", "mask"), SPECIALS, strict=True):
        token_id = tokenizer.token_to_id(token)
        if token_id is None:
            raise DataError(f"tokenizer has no {token} token; a BERT vocabulary needs {', '.join(SPECIALS)}")
        ids[role] = token_id
    return SpecialTokens(ids)
