"""WordPiece tokenization for BERT with Hugging Face ``tokenizers``.

The trained ``tokenizer.json`` carries the normaliser (BERT's: clean text, CJK spacing, and
lower-casing plus accent stripping only for an uncased vocabulary), BERT's pre-tokeniser, the
WordPiece model and a post-processor that adds ``[CLS] A [SEP] (B [SEP])`` with segment ids 0/1,
so that any runtime holding the file (``ptmkit_export`` included) encodes exactly like training.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from ptmkit.contract import SpecialTokens
from ptmkit.errors import DataError

SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def _bert_tokenizer(lowercase: bool, model: Any) -> Any:
    """A ``Tokenizer`` with BERT's normaliser, pre-tokeniser and WordPiece decoder around ``model``."""
    from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers

    tokenizer = Tokenizer(model)
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=lowercase, lowercase=lowercase
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    return tokenizer


def _learn(texts: Iterable[str], vocabulary_size: int, lowercase: bool, min_frequency: int, specials: list[str]) -> dict[str, int]:
    """One run of Hugging Face's WordPiece trainer (BPE merges, ``##`` continuations) on ``texts``;
    the vocabulary it learned, ``specials`` first."""
    from tokenizers import models, trainers

    tokenizer = _bert_tokenizer(lowercase, models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocabulary_size,
        min_frequency=min_frequency,
        special_tokens=specials,
        continuing_subword_prefix="##",
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    return dict(tokenizer.get_vocab())


def train_wordpiece(texts: Iterable[str], vocabulary_size: int, lowercase: bool, min_frequency: int = 2) -> Any:
    """Train a WordPiece vocabulary of at most ``vocabulary_size`` entries on ``texts``.

    The vocabulary is Hugging Face ``tokenizers``' (its ``WordPieceTrainer``: BPE merges with a
    ``##`` continuation prefix), made the same from process to process, whatever the trainer's
    threading. That trainer numbers the ``##x`` continuation characters in hash-map order
    (a new order each process) and breaks ties between equally frequent merges by those numbers,
    so one corpus gave different vocabularies (huggingface/tokenizers#1794, fixed upstream by
    sorting them in PR #2066, not released). Here a first pass collects the continuation
    characters, and the second pass hands them to the trainer in sorted order, ahead of its own
    numbering; merges then tie-break in one order. Ids are renumbered at the end: BERT's specials
    (``[PAD]`` 0 ... ``[MASK]`` 4), then the learned tokens sorted by their text.

    Args:
        texts: the corpus' paragraphs; iterated twice (an iterator is read into memory first).
        vocabulary_size: the most entries, specials included.
        lowercase: an uncased vocabulary (lower-casing and accent stripping before WordPiece).
        min_frequency: a merge must occur this often to enter the vocabulary.

    Raises:
        DataError: the texts produced no token (e.g. only whitespace or control characters).
    """
    from tokenizers import models, processors

    if isinstance(texts, Iterator):
        texts = list(texts)
    alphabet = _learn(texts, 1, lowercase, min_frequency, list(SPECIALS))  # no merges: characters, ##characters
    continuations = sorted(token for token in alphabet if token.startswith("##"))
    learned = _learn(texts, vocabulary_size, lowercase, min_frequency, [*SPECIALS, *continuations])
    if len(learned) <= len(SPECIALS):
        raise DataError("the corpus gave no token to build a vocabulary from (only whitespace or control characters?)")
    ordered = sorted(token for token in learned if token not in SPECIALS)
    vocab = {token: i for i, token in enumerate([*SPECIALS, *ordered])}
    tokenizer = _bert_tokenizer(
        lowercase, models.WordPiece(vocab=vocab, unk_token="[UNK]", max_input_chars_per_word=100, continuing_subword_prefix="##")
    )
    tokenizer.add_special_tokens(list(SPECIALS))
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
    ids = []
    for token in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"):
        token_id = tokenizer.token_to_id(token)
        if token_id is None:
            raise DataError(f"tokenizer has no {token} token; a BERT vocabulary needs {', '.join(SPECIALS)}")
        ids.append(token_id)
    return SpecialTokens(*ids)
