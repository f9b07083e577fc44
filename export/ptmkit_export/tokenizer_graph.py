"""WordPiece tokenization inside the ONNX graph: one model file, a raw string in, logits out.

``ptmkit export RUN --onnx --with-tokenizer`` (or :func:`add_tokenizer_variants` on an existing
export directory) writes ``model.with_tokenizer.onnx``: a tokenizer graph built from the export's
``tokenizer.json`` with onnxruntime-extensions' string operators (``pip install
'ptmkit-export[tokenizer]'``), merged with ``model.onnx`` by ``onnx.compose.merge_models``. Its one
input is ``text`` (string, shape ``(batch,)``); its output is the model's (``logits`` or
``embeddings``). The token ids it feeds the model are those of Hugging Face ``tokenizers`` (the
two-step path: :class:`ptmkit_export.Predictor` with the ``fp32`` variant), truncation to
``max_sequence_length`` and ``[CLS]``/``[SEP]`` included; every export checks that on its dev
texts and :data:`HARD_CASES` and refuses to write a model that disagrees.

Why not onnxruntime-extensions' ``BertTokenizer`` operator (what ``gen_processing_models`` builds):
on the 295 sentences of ``plugins/ptmkit_bert/tests/test_hf_import.py`` with all-MiniLM-L6-v2's vocabulary it gave
other ids than ``tokenizers`` for 7 (one because onnxruntime's Python binding cuts a string at
U+0000, see below): its lowercasing leaves ``Ł``, Greek and Cyrillic capitals
upper-case (they become ``[UNK]``), its accent stripping decomposes neither Hangul syllables nor
kana with dakuten, and it does not split at full-width punctuation such as ``－``. Its WordPiece keeps the pieces found before a failing one (``film☃`` gives ``film [UNK]``
where tokenizers gives one ``[UNK]`` for the word), it takes one text (or one pair) per call, and
it does not match special tokens such as ``[SEP]`` written in the text. So the graph here does
each step with operators whose behaviour is exact, and takes its tables from ``tokenizers``:

1. Reserved private-use characters already in the texts become U+FFFD (deleted later); special
   tokens written in the text (``[SEP]``, ``[MASK]``, ...: tokenizers' added tokens, which it
   matches in the raw text before normalising) become reserved placeholder characters
   (``StringRegexReplace``). The batch's texts are joined into one string with a reserved
   boundary character between them (``StringJoin``).
2. The string is split into characters (``StringRegexSplitWithOffsets``), each character that
   the normaliser or pre-tokeniser changes is replaced by its result (``StringMapping``, ~16k
   entries for BERT: ``Ä`` -> ``a``, ``한`` -> its three jamo, ``（`` -> `` （ ``, a deleted
   character -> a reserved marker), and the characters are joined again.
3. Three small regular expressions over explicit code-point ranges delete the marker and the long
   runs the normaliser deletes (private-use planes), turn tab and newline into spaces, and put
   spaces around the long runs of isolated characters (CJK ideograph blocks). They stay small
   because onnxruntime-extensions compiles them on every call.
4. ``StringSplit`` on spaces gives the words and, through the boundaries, each word's text;
   ``WordpieceTokenizer`` gives their pieces (one row per word) and an ``ai.onnx.ml``
   ``LabelEncoder`` the ids; a word whose greedy match fails becomes one ``[UNK]``, as in
   tokenizers.
5. Standard ONNX operators cut each text to ``max_sequence_length`` minus the special tokens, add
   ``[CLS]``/``[SEP]`` (the tokenizer.json's post-processor), pad to the longest text of the batch
   and build ``segment_ids`` and ``padding_mask``.

The table and the ranges come from running the tokenizer.json's normaliser and pre-tokeniser
over every Unicode code point (about 5 s, once per process and tokenizer). That is exact because
the normalisers accepted (BertNormalizer, Lowercase, NFD, NFKD, StripAccents and Sequences of
them) and pre-tokenisers (BertPreTokenizer, WhitespaceSplit) act on each character alone, and
every code point's result is checked against the plan. The one rule that is not per character
is checked too: NFD puts a run of combining marks in canonical order, so when the normaliser
decomposes and keeps marks, an export whose vocabulary holds any kept mark is refused. Anything
else (BPE, Unigram, Metaspace, Replace or NFC normalisers, added tokens with
``lstrip``/``rstrip``/``single_word``/``normalized``) is refused with a message naming the
tokenizer.json key.

Two environment issues are handled outside the graph. onnxruntime's Python binding passes strings
to the graph as C strings, so a text would end at its first U+0000: :func:`text_feed` sends U+0000
as U+FFFD, both deleted by the normaliser (checked at build time). And TensorFlow's RE2, loaded
first in the same process, takes over onnxruntime-extensions' exported RE2 symbols: the split
into characters then returns the whole string (454 of 634 token-id comparisons wrong). This
module imports onnxruntime-extensions with ``RTLD_DEEPBIND``, ``ptmkit export`` runs the checks in
a fresh process, and the manifest records probe outputs that :class:`ptmkit_export.Predictor`
checks at load (:func:`check_probe`).

Source: onnxruntime-extensions' operators (https://github.com/microsoft/onnxruntime-extensions,
``operators/text`` and ``operators/tokenizer``); tokenizers' BertNormalizer, BertPreTokenizer and
WordPiece (https://github.com/huggingface/tokenizers).
"""

from __future__ import annotations

import functools
import json
import os
import re
import sys
import tempfile
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from ptmkit_export.errors import ExportDirError

#: onnxruntime-extensions' operator domain.
CUSTOM_DOMAIN = "ai.onnx.contrib"
#: Name of the single-file model's input: a string tensor of shape ``(batch,)``.
TEXT_INPUT = "text"
#: Prefix of every name the tokenizer graph adds to the merged model.
PREFIX = "tokenizer/"
#: Largest max abs difference between the single-file model's outputs and the two-step path's.
OUTPUT_TOLERANCE = 1e-5
#: Texts whose first :data:`PROBE_VALUES` outputs the manifest records and :class:`ptmkit_export.Predictor`
#: checks when it loads a single-file variant (accents, kana and hangul, special tokens written out).
PROBE_TEXTS = ["Crème brûlée — ガギグ 한국어 ΟΔΟΣ [SEP] ﬁne 🤖", "special tokens [CLS] x [MASK] y", "plain text ."]
PROBE_VALUES = 16
PROBE_TOLERANCE = 1e-4
#: Variants that get a single-file twin, and the twin's name and file.
BASES = {"fp32": ("fp32+tokenizer", "model.with_tokenizer.onnx"), "int8": ("int8+tokenizer", "model.int8.with_tokenizer.onnx")}

#: Texts every single-file export is checked on, besides the dev texts: each is a class of input on
#: which a tokenizer graph can go wrong (accents, other scripts, emoji, URLs, long words, full-width
#: and zero-width characters, control characters, special tokens written out, truncation).
HARD_CASES = [
    "Crème brûlée, naïve café au lait — déjà vu in Zürich.",
    "Ångström, Øresund, Łódź, São Paulo, Curaçao, Reykjavík, İstanbul, straße, ǅemal.",
    "ÉCOLE ÉLÉMENTAIRE, ΟΔΟΣ ΟΔΟΣ, Ελληνικά, РУССКИЙ ЯЗЫК, Ḁ ẞ Ǆ Ǳ ǲ.",
    "東京は日本の首都です。北京是中国的首都。ガギグゲゴ パピプペポ",
    "한국어 문장도 잘 처리되어야 합니다. 서울특별시, 〮〯 marks",
    "Emoji are tokens too 🤖🎉👩‍👩‍👧‍👦 aren't they? 🇩🇪 ❤️ 👍🏽",
    "See https://example.com/path?q=1&lang=en#frag or mailto:someone@example.org.",
    "Pneumonoultramicroscopicsilicovolcanoconiosis and supercalifragilisticexpialidocious.",
    "a" * 99 + " " + "b" * 100 + " " + "c" * 101 + " is a very long word",
    "Ｆｕｌｌ－ｗｉｄｔｈ ｆｏｒｍｓ（ｙｅｓ） and zero\u200bwidth\u200cjoiners\u200d and\u00a0no-break\u2009spaces\ufeff.",
    "tabs\tand\nnewlines\r\nand \x00 control \x07 characters \x1b[0m \u2028 \u0085 \ufffd",
    "Ελληνικά, русский язык, עברית, العربية, हिन्दी, ไทย, ქართული, ᐃᓄᒃᑎᑐᑦ.",
    "MiXeD CaSe ACRONYMS like NASA, U.S.A. and e.g. i.e. ﬁne ﬂow ﬀ Ⅻ 𝐀𝐁𝐂 ｶﾀｶﾅ",
    "numbers 3.14159, 1,000,000, 10^-12, $5.00, 50%, #hashtag @mention ½ ² ① ٣",
    "special tokens [CLS] x [SEP] y [MASK] z [UNK] [PAD] [SE\x00P] [sep] [[SEP]] [MASK][MASK]",
    "private \ue000 use \ue001\ue002 \U000f0000 and combining e\u0301 a\u0300\u0316 o\u0308\u0304",
    "Arabic tashkeel: مَرْحَبًا, Hebrew niqqud: שָׁלוֹם, Devanagari: क्षत्रिय",
    " leading and trailing spaces   ",
    ".,;:!?()[]{}<>«»‹›“”‘’\"'`~@#$%^&*-_=+\\|/",
    " ".join(["long"] * 300),
    " ".join(["extraordinarily"] * 70),
    "",
]


class TokenizerGraphError(ValueError):
    """A tokenizer.json that the graph cannot reproduce exactly, or a graph that disagrees with it."""


# --- what the tokenizer.json asks for ---------------------------------------------------------------

SUPPORTED_NORMALIZERS = ("BertNormalizer", "Lowercase", "NFD", "NFKD", "StripAccents")
SUPPORTED_PRE_TOKENIZERS = ("BertPreTokenizer", "WhitespaceSplit")


@dataclass(frozen=True)
class WordPieceSpec:
    """What the graph needs from a WordPiece tokenizer.json.

    Attributes:
        vocab: ``{token: id}`` of the WordPiece model.
        unk_token: the unknown token (str); ``unk_id`` its id.
        continuing_prefix: the prefix of word-continuing pieces (``"##"``).
        max_input_chars_per_word: longer words become ``unk_token`` whole.
        prefix_ids, suffix_ids: ids the post-processor puts before and after a single text
            (``[CLS]``, ``[SEP]``); all with type id 0.
        specials: ``(content, id)`` of the added tokens, matched in the raw text.
    """

    vocab: dict[str, int]
    unk_token: str
    unk_id: int
    continuing_prefix: str
    max_input_chars_per_word: int
    prefix_ids: tuple[int, ...]
    suffix_ids: tuple[int, ...]
    specials: tuple[tuple[str, int], ...]


def _refuse(path: Path, key: str, problem: str) -> TokenizerGraphError:
    return TokenizerGraphError(f"{path}: {key}: {problem}; export without --with-tokenizer (the two-step path tokenizes with tokenizers)")


def _check_normalizer(node: Any, path: Path, key: str = "normalizer") -> None:
    if node is None:
        return
    kind = node.get("type")
    if kind == "Sequence":
        for i, child in enumerate(node.get("normalizers", [])):
            _check_normalizer(child, path, f"{key}.normalizers[{i}]")
    elif kind not in SUPPORTED_NORMALIZERS:
        raise _refuse(path, key, f"{kind!r} is not supported in the graph (supported: {', '.join(SUPPORTED_NORMALIZERS)}, Sequence)")


def _check_pre_tokenizer(node: Any, path: Path) -> None:
    kind = None if node is None else node.get("type")
    if kind == "Sequence" and len(node.get("pretokenizers", [])) == 1:
        kind = node["pretokenizers"][0].get("type")
    if kind not in SUPPORTED_PRE_TOKENIZERS:
        raise _refuse(path, "pre_tokenizer", f"{kind!r} is not supported in the graph (supported: {', '.join(SUPPORTED_PRE_TOKENIZERS)})")


def _post_processor_ids(node: Any, vocab: dict[str, int], path: Path) -> tuple[tuple[int, ...], tuple[int, ...]]:
    if node is None:
        return (), ()
    kind = node.get("type")
    if kind == "BertProcessing":
        return (int(node["cls"][1]),), (int(node["sep"][1]),)
    if kind != "TemplateProcessing":
        raise _refuse(path, "post_processor", f"{kind!r} is not supported in the graph (BertProcessing, TemplateProcessing)")
    before: list[int] = []
    after: list[int] = []
    seen_sequence = False
    for item in node.get("single", []):
        if "Sequence" in item:
            if seen_sequence or item["Sequence"].get("id") != "A":
                raise _refuse(path, "post_processor.single", "expected one sequence $A")
            seen_sequence = True
            if item["Sequence"].get("type_id", 0) != 0:
                raise _refuse(path, "post_processor.single", "type_id of $A must be 0")
            continue
        special = item["SpecialToken"]
        if special.get("type_id", 0) != 0:
            raise _refuse(path, "post_processor.single", f"special token {special['id']!r} has type_id {special['type_id']} (0 expected)")
        ids = node.get("special_tokens", {}).get(special["id"], {}).get("ids")
        if not ids:
            raise _refuse(path, "post_processor.special_tokens", f"no ids for {special['id']!r}")
        (after if seen_sequence else before).extend(int(i) for i in ids)
    if not seen_sequence:
        raise _refuse(path, "post_processor.single", "has no sequence $A")
    return tuple(before), tuple(after)


def read_wordpiece_spec(tokenizer_json: str | os.PathLike[str]) -> WordPieceSpec:
    """Read and check ``tokenizer_json`` for the graph.

    Raises:
        TokenizerGraphError: not a WordPiece tokenizer, or a normalizer, pre-tokenizer,
            post-processor or added token the graph cannot reproduce exactly (the message names
            the key).
        ExportDirError: the file is missing or not valid JSON.
    """
    path = Path(tokenizer_json)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ExportDirError(f"{path}: cannot read tokenizer ({str(error).splitlines()[0] if str(error) else type(error).__name__})") from None
    model = data.get("model") or {}
    if model.get("type") != "WordPiece":
        raise _refuse(path, "model.type", f"{model.get('type')!r}: only WordPiece (BERT-family) tokenizers go into the graph")
    _check_normalizer(data.get("normalizer"), path)
    _check_pre_tokenizer(data.get("pre_tokenizer"), path)
    vocab = {str(token): int(i) for token, i in model["vocab"].items()}
    unk = str(model.get("unk_token", "[UNK]"))
    if unk not in vocab:
        raise _refuse(path, "model.unk_token", f"{unk!r} is not in the vocabulary")
    specials = []
    for i, added in enumerate(data.get("added_tokens") or []):
        content = str(added["content"])
        for flag in ("lstrip", "rstrip", "single_word", "normalized"):
            if added.get(flag):
                raise _refuse(path, f"added_tokens[{i}]", f"{content!r} has {flag}: true, which the graph does not reproduce")
        if vocab.get(content) != int(added["id"]):
            raise _refuse(path, f"added_tokens[{i}]", f"{content!r} (id {added['id']}) is not the vocabulary's entry for that id")
        specials.append((content, int(added["id"])))
    for content, _ in specials:
        if any(content != other and content in other for other, _ in specials):
            raise _refuse(path, "added_tokens", f"{content!r} is part of another added token; their matching order is not reproduced")
    before, after = _post_processor_ids(data.get("post_processor"), vocab, path)
    return WordPieceSpec(
        vocab=vocab,
        unk_token=unk,
        unk_id=vocab[unk],
        continuing_prefix=str(model.get("continuing_subword_prefix", "##")),
        max_input_chars_per_word=int(model.get("max_input_chars_per_word", 100)),
        prefix_ids=before,
        suffix_ids=after,
        specials=tuple(specials),
    )


# --- the character plan: tokenizers' normaliser and pre-tokeniser, code point by code point ---------

_SEPARATOR = "\u4dc0"  # a symbol every supported normaliser keeps as it is: splits batched calls
_SURROGATES = range(0xD800, 0xE000)


#: Runs of at least this many consecutive code points of one class stay in the class's regular
#: expression; shorter runs go into the character table. RE2 compiles the expressions on every call
#: (onnxruntime-extensions' StringRegexReplace), so they must stay small: about 15 us each.
LARGE_RUN = 64


@dataclass(frozen=True)
class CharPlan:
    """How the graph reproduces normalisation and pre-tokenisation.

    Attributes:
        table: ``{character: replacement}`` (StringMapping) for every character the normaliser or
            the pre-tokeniser changes, except those in the three range classes below: the
            replacement has spaces where the pre-tokeniser splits, and :attr:`marker` for a
            character the normaliser deletes.
        deleted: code points deleted by a regular expression (long runs, e.g. the private-use
            planes, and :attr:`marker`).
        spaces: code points turned into a space by a regular expression (``\\t`` and ``\\n``,
            which cannot be table keys, and long runs of whitespace).
        isolated: code points given spaces around them by a regular expression (long runs, e.g.
            the CJK ideograph blocks).
        placeholders: private-use code points (deleted by the normaliser, so never part of a
            text's tokens) reserved for the special tokens, one each.
        boundary: the private-use code point put between the texts of a batch.
        marker: the private-use code point the table gives characters to delete.
        reordered: code points the normaliser keeps and may reorder (combining marks, when it
            decomposes: NFD sorts a run of marks by combining class); empty when it does not.
    """

    table: dict[str, str]
    deleted: frozenset[int]
    spaces: frozenset[int]
    isolated: frozenset[int]
    placeholders: tuple[int, ...]
    boundary: int
    marker: int
    reordered: frozenset[int]

    def deletes(self, ch: str) -> bool:
        """Whether the graph deletes the character ``ch`` (as the normaliser does)."""
        return ord(ch) in self.deleted or self.table.get(ch) == chr(self.marker)


def _runs(code_points: set[int]) -> list[tuple[int, int]]:
    """``code_points`` as sorted inclusive ``(first, last)`` runs."""
    runs: list[tuple[int, int]] = []
    for c in sorted(code_points):
        if runs and c == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], c)
        else:
            runs.append((c, c))
    return runs


def _canon(text: str) -> tuple[bool, tuple[str, ...], bool]:
    """Word structure of a spaced string: (starts at a boundary, words, ends at a boundary)."""
    return (text[:1] == " ", tuple(word for word in text.split(" ") if word), text[-1:] == " ")


def _pre_tokenizer_kinds(pre_tokenizer: Any, chars: list[str]) -> dict[str, str]:
    """What the pre-tokeniser does with each character between two letters: ``"word"`` (part of
    the word), ``"space"`` (splits and is dropped) or ``"isolated"`` (a word of its own)."""
    kinds: dict[str, str] = {}
    for start in range(0, len(chars), 4096):
        chunk = chars[start : start + 4096]
        text = "q" + "q".join(chunk) + "q"
        covered = bytearray(len(text))  # 0: in no word, 1: a word of one character, 2: a longer word
        for _, (begin, end) in pre_tokenizer.pre_tokenize_str(text):
            covered[begin:end] = bytes([1 if end - begin == 1 else 2]) * (end - begin)
        for j, ch in enumerate(chunk):
            kinds[ch] = ("space", "isolated", "word")[covered[2 * j + 1]]
    for ch, kind in kinds.items():  # check the batched reading against one character alone
        expected = {"word": [f"q{ch}q"], "space": ["q", "q"], "isolated": ["q", ch, "q"]}[kind]
        if kind != "word" and [w for w, _ in pre_tokenizer.pre_tokenize_str(f"q{ch}q")] != expected:
            raise TokenizerGraphError(f"pre_tokenizer: U+{ord(ch):04X} is not split by a per-character rule")
    return kinds


@functools.lru_cache(maxsize=8)
def char_plan(normalizer_json: str, pre_tokenizer_json: str, placeholders: int) -> CharPlan:
    """Run the normaliser and pre-tokeniser (given as their tokenizer.json JSON) over every code point.

    Args:
        normalizer_json, pre_tokenizer_json: ``json.dumps`` of the tokenizer.json's
            ``normalizer`` (may be ``"null"``) and ``pre_tokenizer``.
        placeholders: how many placeholder code points to reserve (one per special token).

    Raises:
        TokenizerGraphError: a character whose normalised form the three character classes and
            the table cannot reproduce, or too few deletable private-use code points.
    """
    normalize, pre_tokenizer = _normalizer_and_pre_tokenizer(normalizer_json, pre_tokenizer_json)
    normalized = _normal_forms(normalize)
    kinds = _pre_tokenizer_kinds(pre_tokenizer, list({ch for form in normalized.values() for ch in form}))
    deleted, spaces, isolated, table = _classify(normalized, kinds)
    reserved = [c for c in range(0xE000, 0xF900) if c in deleted][: placeholders + 2]
    if len(reserved) < placeholders + 2:
        raise TokenizerGraphError("normalizer: keeps private-use characters, so the graph has no placeholders for special tokens")
    *names, boundary, marker = reserved
    deleted -= set(reserved)  # step one of the graph turns them into U+FFFD, which is deleted
    regex = _split_long_runs(table, {"deleted": deleted, "spaces": spaces, "isolated": isolated}, marker)
    _check_char_plan(normalized, kinds, reserved, table, regex)
    return CharPlan(
        table=table,
        deleted=frozenset(regex["deleted"]),
        spaces=frozenset(regex["spaces"]),
        isolated=frozenset(regex["isolated"]),
        placeholders=tuple(names),
        boundary=boundary,
        marker=marker,
        reordered=_reordered_marks(normalized, normalize),
    )


def _normalizer_and_pre_tokenizer(normalizer_json: str, pre_tokenizer_json: str) -> tuple[Callable[[str], str], Any]:
    """tokenizers' normaliser (as a ``str -> str`` function; identity for ``"null"``) and pre-tokeniser."""
    from tokenizers import Tokenizer

    skeleton = {
        "version": "1.0",
        "normalizer": json.loads(normalizer_json),
        "pre_tokenizer": json.loads(pre_tokenizer_json),
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##", "max_input_chars_per_word": 100, "vocab": {"[UNK]": 0}},
    }
    tokenizer = Tokenizer.from_str(json.dumps(skeleton))
    normalizer, pre_tokenizer = tokenizer.normalizer, tokenizer.pre_tokenizer
    normalize: Callable[[str], str] = normalizer.normalize_str if normalizer is not None else (lambda s: s)
    return normalize, pre_tokenizer


def _normal_forms(normalize: Callable[[str], str]) -> dict[int, str]:
    """``{code point: its normal form}`` for every code point but the surrogates."""
    code_points = [c for c in range(0x110000) if c not in _SURROGATES and chr(c) != _SEPARATOR]
    normalized: dict[int, str] = {}
    for start in range(0, len(code_points), 4096):
        chunk = code_points[start : start + 4096]
        parts = normalize(_SEPARATOR.join(map(chr, chunk))).split(_SEPARATOR)
        if len(parts) == len(chunk):
            normalized.update(zip(chunk, parts, strict=True))
        else:  # a character's normal form holds the separator: one at a time
            normalized.update((c, normalize(chr(c))) for c in chunk)
    normalized[ord(_SEPARATOR)] = normalize(_SEPARATOR)
    return normalized


def _spaced(text: str, kinds: dict[str, str]) -> str:
    """``text`` as the pre-tokeniser splits it: a space where it splits, spaces around an isolated character."""
    return "".join(" " if kinds[ch] == "space" else f" {ch} " if kinds[ch] == "isolated" else ch for ch in text)


def _classify(normalized: dict[int, str], kinds: dict[str, str]) -> tuple[set[int], set[int], set[int], dict[str, str]]:
    """``(deleted, spaces, isolated, table)``: each code point by what normalisation and pre-tokenisation make of it.

    Deleted (normal form empty), turned into a space, isolated (a word of its own), or else, when
    the normaliser changes it, a ``table`` entry ``{character: its spaced normal form}``.
    """
    deleted, spaces, isolated, table = set(), set(), set(), {}
    for c, form in normalized.items():
        ch = chr(c)
        if form == ch:  # most code points: unchanged by the normaliser
            kind = kinds[ch]
            if kind == "space" and ch != " ":
                spaces.add(c)
            elif kind == "isolated":
                isolated.add(c)
            continue
        if form == "":
            deleted.add(c)
            continue
        target = _spaced(form, kinds)
        if target == f" {ch} ":  # e.g. CJK ideographs, which BertNormalizer surrounds with spaces
            isolated.add(c)
        elif _canon(target) == _canon(" "):
            spaces.add(c)
        else:
            table[ch] = target
    return deleted, spaces, isolated, table


def _split_long_runs(table: dict[str, str], classes: dict[str, set[int]], marker: int) -> dict[str, set[int]]:
    """The code points each class's regular expression keeps: runs of :data:`LARGE_RUN` or more.

    Short runs go into ``table`` instead (updated in place): deleted characters map to ``marker``,
    spaces to ``" "``, isolated characters to themselves between spaces. Tab and newline, which
    cannot be table keys, always stay in the expressions; ``marker`` is always deleted.
    """
    regex: dict[str, set[int]] = {"deleted": {marker}, "spaces": set(), "isolated": set()}
    replacements: dict[str, Callable[[str], str]] = {"deleted": lambda ch: chr(marker), "spaces": lambda ch: " ", "isolated": lambda ch: f" {ch} "}
    for name in ("deleted", "spaces", "isolated"):
        for first, last in _runs(classes[name]):
            for c in range(first, last + 1):
                if last - first + 1 >= LARGE_RUN or chr(c) in "\t\n":  # tab and newline cannot be table keys
                    regex[name].add(c)
                else:
                    table[chr(c)] = replacements[name](chr(c))
    return regex


def _check_char_plan(normalized: dict[int, str], kinds: dict[str, str], reserved: list[int], table: dict[str, str], regex: dict[str, set[int]]) -> None:
    """Check the plan on every code point: the table, then the three expressions, must give the
    pre-tokenised normal form; ``TokenizerGraphError`` for the first that does not."""

    def after_table(text: str) -> str:
        return "".join(
            "" if ord(x) in regex["deleted"] else " " if ord(x) in regex["spaces"] else f" {x} " if ord(x) in regex["isolated"] else x
            for x in text
        )

    for c, form in normalized.items():
        ch = chr(c)
        if c in reserved:
            continue
        got = after_table(table.get(ch, ch))
        if got != form and _canon(got) != _canon(_spaced(form, kinds)):
            raise TokenizerGraphError(f"normalizer: U+{c:04X} becomes {_spaced(form, kinds)!r}, which the graph would make {got!r}")


def _reordered_marks(normalized: dict[int, str], normalize: Callable[[str], str]) -> frozenset[int]:
    """The combining marks the normaliser keeps and reorders, if it does (see :attr:`CharPlan.reordered`)."""
    # NFD sorts runs of combining marks by combining class: the one rule that is not per character.
    marks = sorted((c for c, form in normalized.items() if form == chr(c) and unicodedata.combining(chr(c))), key=lambda c: unicodedata.combining(chr(c)))
    if marks and unicodedata.combining(chr(marks[0])) != unicodedata.combining(chr(marks[-1])):
        high, low = chr(marks[-1]), chr(marks[0])
        if normalize(f"a{high}{low}") != normalize("a") + high + low:
            return frozenset(marks)
    return frozenset()


def _char_class(code_points: frozenset[int]) -> str:
    """An RE2 character class matching exactly ``code_points`` (as ranges)."""
    return "[" + "".join(f"\\x{{{a:X}}}" if a == b else f"\\x{{{a:X}}}-\\x{{{b:X}}}" for a, b in _runs(set(code_points))) + "]"


# --- the graph ----------------------------------------------------------------------------------------


class _Builder:
    """Nodes and initializers of a graph whose every name starts with :data:`PREFIX`."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.count = 0

    def name(self, hint: str) -> str:
        self.count += 1
        return f"{PREFIX}{hint}_{self.count}"

    def const(self, value: Any, dtype: Any = np.int64, hint: str = "const") -> str:
        name = self.name(hint)
        if dtype is str:
            array = np.array(value, dtype=object)
            self.initializers.append(helper.make_tensor(name, TensorProto.STRING, array.shape, [s.encode("utf-8") for s in array.ravel()]))
        else:
            self.initializers.append(onnx.numpy_helper.from_array(np.array(value, dtype=dtype), name))
        return name

    def op(self, op_type: str, inputs: Sequence[str], outputs: int | Sequence[str] = 1, domain: str = "", **attributes: Any) -> Any:
        names = [self.name(op_type.lower()) for _ in range(outputs)] if isinstance(outputs, int) else list(outputs)
        self.nodes.append(helper.make_node(op_type, list(inputs), names, name=self.name(op_type), domain=domain, **attributes))
        return names[0] if len(names) == 1 else names


def build_tokenizer_model(
    tokenizer_json: str | os.PathLike[str],
    max_sequence_length: int,
    pad_token_id: int,
    outputs: Sequence[dict[str, str]],
    opset: int = 15,
    ir_version: int | None = None,
) -> onnx.ModelProto:
    """The tokenizer graph alone: ``text`` (string ``(batch,)``) in, the model's input tensors out.

    Args:
        tokenizer_json: a WordPiece tokenizer.json (see :func:`read_wordpiece_spec`).
        max_sequence_length: tokens per text after truncation, special tokens included.
        pad_token_id: id that pads texts shorter than the longest of the batch.
        outputs: the manifest's ``inputs``: ``{"name", "dtype" ("int32"/"int64"), "encoding"
            ("ids", "type_ids" or "attention_mask")}``; each becomes an output of shape
            ``(batch, length)``, ``length`` the longest text's token count in the batch.
        opset: the default-domain opset (13 or newer: that of the model it is merged with).
        ir_version: the ONNX IR version (that of the model it is merged with); default onnx's.

    Returns:
        an ``onnx.ModelProto`` using onnxruntime-extensions' ``ai.onnx.contrib`` operators.

    Raises:
        TokenizerGraphError: the tokenizer cannot be reproduced exactly (see the module docstring),
            ``max_sequence_length`` leaves no room for text, or ``opset < 13``.
    """
    path = Path(tokenizer_json)
    spec = read_wordpiece_spec(path)
    if opset < 13:
        raise TokenizerGraphError(f"opset {opset}: the tokenizer graph needs opset 13 or newer")
    budget = max_sequence_length - len(spec.prefix_ids) - len(spec.suffix_ids)
    if budget < 1:
        raise TokenizerGraphError(f"max_sequence_length {max_sequence_length} leaves no room for text after {len(spec.prefix_ids) + len(spec.suffix_ids)} special tokens")
    plan = _checked_char_plan(path, spec)
    g = _Builder()
    # Reserved private-use characters (the normaliser deletes them): one per special token, the
    # boundary put between the texts of a batch (which run through the string operators as one
    # string) and the table's deletion marker. Those already in the text become U+FFFD (deleted).
    placeholders = [chr(c) for c in plan.placeholders]
    words, word_text = _words(g, spec, plan, placeholders)
    ids, splits = _wordpiece_ids(g, spec, words, placeholders)
    zero, one, minus_one = g.const([0]), g.const([1]), g.const([-1])
    ids, piece_text = _unknown_words_as_one_unk(g, spec.unk_id, ids, splits, word_text, zero, one, minus_one)
    made = _pack_rows(g, spec, ids, piece_text, budget, pad_token_id, zero, one)
    return _tokenizer_model(g, made, outputs, opset, ir_version)


#: The attribute that puts a node in onnxruntime-extensions' operator domain.
_CONTRIB: dict[str, Any] = {"domain": CUSTOM_DOMAIN}


def _checked_char_plan(path: Path, spec: WordPieceSpec) -> CharPlan:
    """The :class:`CharPlan` of the tokenizer.json at ``path``, refused where the graph would go wrong.

    Raises:
        TokenizerGraphError: a vocabulary token holds a combining mark the normaliser may reorder,
            or the normaliser keeps U+0000 or U+FFFD (the runtime passes U+0000 as U+FFFD).
    """
    data = json.loads(path.read_text(encoding="utf-8"))
    plan = char_plan(json.dumps(data.get("normalizer"), sort_keys=True), json.dumps(data.get("pre_tokenizer"), sort_keys=True), len(spec.specials))
    risky = sorted({token for token in spec.vocab if any(ord(ch) in plan.reordered for ch in token)})
    if risky:
        raise _refuse(path, "model.vocab", f"holds {risky[0]!r}, a spacing mark whose order NFD can change; the graph does not reorder marks")
    for ch in ("\x00", "\ufffd"):
        if not plan.deletes(ch):
            raise _refuse(path, "normalizer", f"keeps U+{ord(ch):04X}, which the runtime uses to pass U+0000 (needs clean_text)")
    return plan


def _words(g: _Builder, spec: WordPieceSpec, plan: CharPlan, placeholders: list[str]) -> tuple[str, str]:
    """Normalise and pre-tokenise the ``text`` input: ``(words (W,) string, text row of each word (W,) int64)``.

    The texts' special tokens become their placeholders, the batch is joined into one string with
    the boundary between texts, each character goes through the plan's table then its three
    regular expressions, and the result is split at spaces.
    """
    boundary = chr(plan.boundary)
    reserved = frozenset([*plan.placeholders, plan.boundary, plan.marker])
    text = g.op("StringRegexReplace", [TEXT_INPUT, g.const([_char_class(reserved)], str), g.const(["\ufffd"], str)], **_CONTRIB)
    for (content, _), placeholder in sorted(zip(spec.specials, placeholders, strict=True), key=lambda item: -len(item[0][0])):
        text = g.op("StringRegexReplace", [text, g.const([re.escape(content)], str), g.const([f" {placeholder} "], str)], **_CONTRIB)
    axis0 = g.const([0])
    text = g.op("StringJoin", [text, g.const([f" {boundary} "], str), axis0], **_CONTRIB)  # (1,)
    every_char = g.const(["((?s).)"], str)
    chars, _, _, _ = g.op("StringRegexSplitWithOffsets", [text, every_char, every_char], 4, **_CONTRIB)
    table = "\n".join(f"{key}\t{value}" for key, value in sorted(plan.table.items()))
    mapped = g.op("StringMapping", [chars], map=table, **_CONTRIB)
    text = g.op("StringJoin", [mapped, g.const([""], str), axis0], **_CONTRIB)
    for points, rewrite in ((plan.deleted, ""), (plan.spaces, " "), (plan.isolated, " \\0 ")):
        if points:
            text = g.op("StringRegexReplace", [text, g.const([_char_class(points)], str), g.const([rewrite], str)], **_CONTRIB)
    _, words, _ = g.op("StringSplit", [text, g.const([" "], str), g.const([True], np.bool_)], 3, **_CONTRIB)
    is_boundary = g.op("LabelEncoder", [words], domain="ai.onnx.ml", keys_strings=[boundary], values_int64s=[1], default_int64=0)
    in_text = g.op("Not", [g.op("Cast", [is_boundary], to=TensorProto.BOOL)])
    word_text = g.op("Compress", [g.op("CumSum", [is_boundary, g.const(0)]), in_text])  # (W,) text row of each word
    words = g.op("Compress", [words, in_text])
    return words, word_text


def _wordpiece_ids(g: _Builder, spec: WordPieceSpec, words: str, placeholders: list[str]) -> tuple[str, str]:
    """WordPiece over ``words``: ``(piece ids (P,) int64, piece splits (W + 1,) int64)``; a placeholder is its special token's id."""
    vocab = dict(spec.vocab)
    for (_, token_id), placeholder in zip(spec.specials, placeholders, strict=True):
        vocab[placeholder] = token_id
    pieces, splits, _, _ = g.op(
        "WordpieceTokenizer",
        [words, g.const(np.zeros(0, np.int64))],
        4,
        vocab=json.dumps(vocab, ensure_ascii=False),
        suffix_indicator=spec.continuing_prefix,
        unknown_token=spec.unk_token,
        max_input_chars_per_word=spec.max_input_chars_per_word,
        **_CONTRIB,
    )
    keys = list(vocab)
    ids = g.op("LabelEncoder", [pieces], domain="ai.onnx.ml", keys_strings=keys, values_int64s=[vocab[k] for k in keys], default_int64=spec.unk_id)
    return ids, splits


def _unknown_words_as_one_unk(
    g: _Builder, unk_id: int, ids: str, splits: str, word_text: str, zero: str, one: str, minus_one: str
) -> tuple[str, str]:
    """A word whose greedy match failed ends in [UNK]; tokenizers makes the whole word one [UNK].

    Returns ``(piece ids (P',) int64, text row of each piece (P',) int64)`` with such words cut to
    their first piece, made [UNK].
    """
    unk = g.const(unk_id)
    # Word of each piece: a 1 where each word after the first starts, summed.
    starts = g.op("Slice", [splits, zero, minus_one])  # (W,) first piece of each word
    ends = g.op("Slice", [splits, one, g.const([np.iinfo(np.int64).max])])  # (W,) one past its last
    n_pieces = g.op("Shape", [ids])
    piece_index = g.op("Range", [g.const(0), g.op("Squeeze", [n_pieces, zero]), g.const(1)])
    later_starts = g.op("Slice", [starts, one, g.const([np.iinfo(np.int64).max])])
    ones = g.op("ConstantOfShape", [g.op("Shape", [later_starts])], value=helper.make_tensor("value", TensorProto.INT64, [1], [1]))
    zeros = g.op("ConstantOfShape", [n_pieces], value=helper.make_tensor("value", TensorProto.INT64, [1], [0]))
    marks = g.op("ScatterElements", [zeros, later_starts, ones])
    piece_word = g.op("CumSum", [marks, g.const(0)])
    word_failed = g.op("Equal", [g.op("Gather", [ids, g.op("Sub", [ends, one])]), unk])
    piece_failed = g.op("Gather", [word_failed, piece_word])
    first_piece = g.op("Equal", [piece_index, g.op("Gather", [starts, piece_word])])
    keep = g.op("Or", [g.op("Not", [piece_failed]), first_piece])
    ids = g.op("Compress", [g.op("Where", [piece_failed, unk, ids]), keep])
    piece_text = g.op("Compress", [g.op("Gather", [word_text, piece_word]), keep])
    return ids, piece_text


def _pack_rows(
    g: _Builder, spec: WordPieceSpec, ids: str, piece_text: str, budget: int, pad_token_id: int, zero: str, one: str
) -> dict[str, str]:
    """Per text: count the pieces, truncate to ``budget``, place them after the prefix specials.

    Returns ``{"ids", "attention_mask", "type_ids"}``: int64 ``(batch, length)`` tensors, ``length``
    the longest row's token count, specials included.
    """
    batch = g.op("Shape", [TEXT_INPUT])
    rows = g.op("Range", [g.const(0), g.op("Squeeze", [batch, zero]), g.const(1)])
    same_text = g.op("Equal", [g.op("Unsqueeze", [piece_text, zero]), g.op("Unsqueeze", [rows, one])])  # (B, P)
    counts = g.op("ReduceSum", [g.op("Cast", [same_text], to=TensorProto.INT64), one], keepdims=0)
    offsets = g.op("CumSum", [counts, g.const(0)], exclusive=1)
    position = g.op("Sub", [g.op("Range", [g.const(0), g.op("Squeeze", [g.op("Shape", [ids]), zero]), g.const(1)]), g.op("Gather", [offsets, piece_text])])
    fits = g.op("Less", [position, g.const(budget)])
    ids, piece_text, position = (g.op("Compress", [x, fits]) for x in (ids, piece_text, position))
    lengths = g.op("Min", [counts, g.const(budget)])
    n_special = len(spec.prefix_ids) + len(spec.suffix_ids)
    totals = g.op("Add", [lengths, g.const(n_special)])
    width = g.op("ReduceMax", [totals], keepdims=1)
    shape = g.op("Concat", [batch, width], axis=0)
    token_ids = g.op("Expand", [g.const(pad_token_id), shape])
    column = g.op("Add", [position, g.const(len(spec.prefix_ids))])
    index = g.op("Concat", [g.op("Unsqueeze", [piece_text, one]), g.op("Unsqueeze", [column, one])], axis=1)
    token_ids = g.op("ScatterND", [token_ids, index, ids])
    for offset, token_id in enumerate(spec.prefix_ids):
        at = g.op("Concat", [g.op("Unsqueeze", [rows, one]), g.op("Expand", [g.const([[offset]]), g.op("Concat", [batch, one], axis=0)])], axis=1)
        token_ids = g.op("ScatterND", [token_ids, at, g.op("Expand", [g.const(token_id), batch])])
    for offset, token_id in enumerate(spec.suffix_ids):
        columns = g.op("Add", [lengths, g.const(len(spec.prefix_ids) + offset)])
        at = g.op("Concat", [g.op("Unsqueeze", [rows, one]), g.op("Unsqueeze", [columns, one])], axis=1)
        token_ids = g.op("ScatterND", [token_ids, at, g.op("Expand", [g.const(token_id), batch])])
    positions = g.op("Range", [g.const(0), g.op("Squeeze", [width, zero]), g.const(1)])
    mask = g.op("Less", [g.op("Unsqueeze", [positions, zero]), g.op("Unsqueeze", [totals, one])])
    return {"ids": token_ids, "attention_mask": g.op("Cast", [mask], to=TensorProto.INT64), "type_ids": g.op("Expand", [g.const(0), shape])}


def _tokenizer_model(g: _Builder, made: dict[str, str], outputs: Sequence[dict[str, str]], opset: int, ir_version: int | None) -> onnx.ModelProto:
    """The model of ``g``'s nodes: input ``text``, one output per manifest input (cast to its dtype)."""
    graph_outputs = []
    for spec_out in outputs:
        name, encoding, dtype = spec_out["name"], spec_out["encoding"], spec_out["dtype"]
        if encoding not in made:
            raise TokenizerGraphError(f"input {name!r} has encoding {encoding!r}; the graph makes ids, type_ids and attention_mask")
        onnx_type = {"int32": TensorProto.INT32, "int64": TensorProto.INT64}[dtype]
        g.op("Cast", [made[encoding]], [PREFIX + name], to=onnx_type)
        graph_outputs.append(helper.make_tensor_value_info(PREFIX + name, onnx_type, ["batch", "length"]))
    graph = helper.make_graph(
        g.nodes,
        "ptmkit_wordpiece_tokenizer",
        [helper.make_tensor_value_info(TEXT_INPUT, TensorProto.STRING, ["batch"])],
        graph_outputs,
        g.initializers,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("ai.onnx.ml", 2), helper.make_opsetid(CUSTOM_DOMAIN, 1)],
        producer_name="ptmkit_export.tokenizer_graph",
    )
    if ir_version is not None:
        model.ir_version = ir_version
    return model


# --- onnxruntime-extensions, merging, checking -------------------------------------------------------


def _import_extensions() -> Any:
    """Import onnxruntime_extensions, its library bound to its own symbols first (``RTLD_DEEPBIND``).

    The library carries RE2 and exports its symbols; TensorFlow, loaded earlier in the same
    process, carries another RE2 whose symbols would otherwise take precedence, and then a pattern
    with a capture group no longer splits a string (the graph's character split gives the whole
    text back). Measured here: 454 of 634 token-id comparisons wrong after ``import tensorflow``
    without it, none with it. An onnxruntime_extensions imported earlier without the flag stays as
    it was; :func:`check_probe` then catches the damage.
    """
    if "onnxruntime_extensions" in sys.modules and sys.modules["onnxruntime_extensions"] is not None:
        return sys.modules["onnxruntime_extensions"]
    deepbind = getattr(os, "RTLD_DEEPBIND", 0)
    flags = sys.getdlopenflags()
    if deepbind:
        sys.setdlopenflags(flags | deepbind)
    try:
        import onnxruntime_extensions
    finally:
        sys.setdlopenflags(flags)
    return onnxruntime_extensions


def extensions_library(what: str) -> str:
    """Path of onnxruntime-extensions' custom-operator library, for ``SessionOptions.register_custom_ops_library``.

    Args:
        what: the file or variant that needs it, for the error message.

    Raises:
        ExportDirError: onnxruntime-extensions is not installed (``pip install 'ptmkit-export[tokenizer]'``).
    """
    try:
        onnxruntime_extensions = _import_extensions()
    except ImportError:
        raise ExportDirError(
            f"{what}: tokenizes inside the ONNX graph and needs onnxruntime-extensions: pip install 'ptmkit-export[tokenizer]'"
        ) from None
    return str(onnxruntime_extensions.get_library_path())


def extensions_session(model: onnx.ModelProto | Path, threads: int = 1) -> Any:
    """A CPU ``onnxruntime.InferenceSession`` of ``model`` (a path or a ModelProto) with
    onnxruntime-extensions' operators registered and ``threads`` intra-op threads."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.register_custom_ops_library(extensions_library(str(model) if isinstance(model, Path) else "tokenizer graph"))
    source = str(model) if isinstance(model, Path) else model.SerializeToString()
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])


def text_feed(texts: Sequence[str]) -> np.ndarray:
    """The ``text`` input for ``texts``: a ``(len(texts),)`` object array of str, U+0000 as U+FFFD.

    onnxruntime's Python binding hands strings to the graph as C strings, which would end a text at
    its first U+0000; both characters are deleted by the normaliser (checked when the graph is built).
    """
    return np.array([text.replace("\x00", "\ufffd") for text in texts], dtype=object)


def _reference_tokenizer(tokenizer_json: str | os.PathLike[str], max_sequence_length: int, pad_token_id: int) -> Any:
    """Hugging Face tokenizers set up as :class:`ptmkit_export.Predictor` sets it up: truncation to
    ``max_sequence_length`` tokens, padding with ``pad_token_id`` to the longest text of a batch."""
    from tokenizers import Tokenizer

    reference = Tokenizer.from_file(str(tokenizer_json))
    reference.enable_truncation(max_length=max_sequence_length)
    reference.enable_padding(pad_id=pad_token_id, pad_token=reference.id_to_token(pad_token_id) or "[PAD]")
    return reference


def count_token_mismatches(
    tokenizer_model: onnx.ModelProto, tokenizer_json: str | os.PathLike[str], texts: Sequence[str], max_sequence_length: int, pad_token_id: int,
    outputs: Sequence[dict[str, str]], batch_sizes: Sequence[int] = (1, 16),
) -> tuple[int, str | None]:
    """Run ``tokenizer_model`` and tokenizers (as :class:`ptmkit_export.Predictor` sets it up) on ``texts``.

    Returns:
        ``(mismatches, first)``: how many (text, batch size) pairs give other ``outputs`` arrays
        (ids, type ids or mask) than tokenizers, and a one-line description of the first, or None.
    """
    reference = _reference_tokenizer(tokenizer_json, max_sequence_length, pad_token_id)
    session = extensions_session(tokenizer_model)
    names = [PREFIX + spec["name"] for spec in outputs]
    mismatches, first = 0, None
    for batch_size in batch_sizes:
        for start in range(0, len(texts), batch_size):
            chunk = list(texts[start : start + batch_size])
            got = dict(zip(names, session.run(names, {TEXT_INPUT: text_feed(chunk)}), strict=True))
            expected = reference.encode_batch(chunk)
            for i, encoding in enumerate(expected):
                for spec in outputs:
                    if got[PREFIX + spec["name"]][i].tolist() != getattr(encoding, spec["encoding"]):
                        mismatches += 1
                        if first is None:
                            first = (
                                f"{chunk[i][:60]!r} (batch of {len(chunk)}): {spec['name']} {got[PREFIX + spec['name']][i].tolist()[:12]}... "
                                f"where tokenizers gives {getattr(encoding, spec['encoding'])[:12]}..."
                            )
                        break
    return mismatches, first


def merge_tokenizer(tokenizer_model: onnx.ModelProto, model_path: Path, out_path: Path, inputs: Sequence[dict[str, str]]) -> None:
    """Write ``tokenizer_model`` followed by the model at ``model_path`` as one file, ``out_path``.

    The tokenizer's outputs feed the model's inputs of the same names (``inputs``: the manifest's);
    the merged model's input is ``text`` and its outputs are the model's.

    Raises:
        TokenizerGraphError: the model's opsets or names clash with the tokenizer graph's.
    """
    model = onnx.load(str(model_path))
    opsets = {entry.domain or "": entry.version for entry in model.opset_import}
    for domain, version in ((entry.domain or "", entry.version) for entry in tokenizer_model.opset_import):
        if domain in opsets and opsets[domain] != version:
            raise TokenizerGraphError(f"{model_path}: uses opset {opsets[domain]} of {domain or 'ai.onnx'!r}, the tokenizer graph {version}")
    tokenizer_model.ir_version = model.ir_version
    clashes = onnx.compose.check_overlapping_names(tokenizer_model.graph, model.graph, io_map=[(PREFIX + spec["name"], spec["name"]) for spec in inputs])
    if clashes:
        raise TokenizerGraphError(f"{model_path}: names shared with the tokenizer graph: {clashes[0]}")
    merged = onnx.compose.merge_models(
        tokenizer_model, model, io_map=[(PREFIX + spec["name"], spec["name"]) for spec in inputs], producer_name="ptmkit_export.tokenizer_graph"
    )
    onnx.save(merged, str(out_path))


def build_tokenizer_variants(
    directory: str | os.PathLike[str],
    variants: dict[str, Any],
    tokenizer_json: str | os.PathLike[str],
    inputs: Sequence[dict[str, str]],
    output_name: str,
    max_sequence_length: int,
    pad_token_id: int,
    check_texts: Sequence[str] = (),
    out_dir: str | os.PathLike[str] | None = None,
) -> dict[str, dict[str, Any]]:
    """Write a single-file twin of the ``fp32`` (and ``int8``) variant into ``directory`` and check it.

    Checks, on :data:`HARD_CASES` plus ``check_texts``, one at a time and in batches of 16: the
    graph's token ids, segment ids and padding mask equal tokenizers' (none may differ), and the
    single-file model's outputs equal the two-step path's (max abs difference <=
    :data:`OUTPUT_TOLERANCE`).

    Args:
        directory: the export directory being built (holds the variants' files).
        variants: the manifest's ``variants`` so far.
        tokenizer_json: the export's tokenizer.json.
        inputs: the manifest's ``inputs``; output_name: the model output to compare.
        max_sequence_length, pad_token_id: as in the manifest.
        check_texts: more texts to check on (e.g. the dev set's).
        out_dir: where the new files go (default ``directory``).

    Returns:
        ``{"fp32+tokenizer": {...}, "int8+tokenizer": {...}}`` (the latter when an int8 variant
        exists): manifest entries with ``file``, ``base``, ``text_input``, ``ok`` (the base's),
        ``requires`` (package versions) and ``check`` (texts, token_id_mismatches,
        max_abs_diff_vs_two_step).

    Raises:
        TokenizerGraphError: the tokenizer cannot go into the graph, or a check failed (nothing
            is left in ``directory`` then).
        ExportDirError: onnxruntime-extensions is missing.
    """
    directory = Path(directory)
    texts = [*HARD_CASES, *check_texts]
    fp32 = onnx.load(str(directory / variants["fp32"]["file"]), load_external_data=False)
    opset = next(entry.version for entry in fp32.opset_import if (entry.domain or "") == "")
    tokenizer_model = build_tokenizer_model(tokenizer_json, max_sequence_length, pad_token_id, inputs, opset=opset, ir_version=fp32.ir_version)
    mismatches, first = count_token_mismatches(tokenizer_model, tokenizer_json, texts, max_sequence_length, pad_token_id, inputs)
    if mismatches:
        raise TokenizerGraphError(f"{tokenizer_json}: the tokenizer graph disagrees with tokenizers on {mismatches} text(s), e.g. {first}; nothing written")

    reference = _reference_tokenizer(tokenizer_json, max_sequence_length, pad_token_id)
    made: dict[str, dict[str, Any]] = {}
    written: list[Path] = []
    try:
        for base, (name, file_name) in BASES.items():
            if base not in variants:
                continue
            out_path = Path(out_dir or directory) / file_name
            merge_tokenizer(onnx.ModelProto.FromString(tokenizer_model.SerializeToString()), directory / variants[base]["file"], out_path, inputs)
            written.append(out_path)
            two_step = _cpu_session(directory / variants[base]["file"])
            single = extensions_session(out_path)
            worst = _max_abs_diff_vs_two_step(single, two_step, reference, texts, inputs, output_name)
            if worst > OUTPUT_TOLERANCE:
                raise TokenizerGraphError(f"{out_path}: outputs differ from the two-step path by {worst:.2e} > {OUTPUT_TOLERANCE:g}; nothing written")
            made[name] = _variant_entry(single, out_path, base, variants[base], len(texts), worst, output_name)
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        raise
    return made


def _cpu_session(model_path: Path) -> Any:
    """A one-thread CPU ONNX Runtime session of ``model_path``."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])


def _max_abs_diff_vs_two_step(
    single: Any, two_step: Any, reference: Any, texts: Sequence[str], inputs: Sequence[dict[str, str]], output_name: str
) -> float:
    """Largest absolute difference of ``output_name`` between the ``single``-file session on
    ``texts`` and the two-step path (``reference`` tokenizers, then the ``two_step`` session), in batches of 16."""
    worst = 0.0
    for start in range(0, len(texts), 16):
        chunk = texts[start : start + 16]
        encodings = reference.encode_batch(chunk)
        feeds = {spec["name"]: np.asarray([getattr(e, spec["encoding"]) for e in encodings], dtype=spec["dtype"]) for spec in inputs}
        (expected,) = two_step.run([output_name], feeds)
        (got,) = single.run([output_name], {TEXT_INPUT: text_feed(chunk)})
        worst = max(worst, float(np.max(np.abs(np.asarray(expected) - np.asarray(got)))))
    return worst


def _variant_entry(
    single: Any, out_path: Path, base: str, base_entry: dict[str, Any], texts: int, worst: float, output_name: str
) -> dict[str, Any]:
    """The manifest entry of a checked single-file variant, with its probe outputs (see :func:`check_probe`)."""
    from importlib.metadata import version

    (probe,) = single.run([output_name], {TEXT_INPUT: text_feed(PROBE_TEXTS)})
    return {
        "file": out_path.name,
        "base": base,
        "text_input": TEXT_INPUT,
        "ok": bool(base_entry.get("ok", True)),
        "requires": {"onnxruntime-extensions": version("onnxruntime-extensions"), "tokenizers": version("tokenizers")},
        "check": {"texts": texts, "token_id_mismatches": 0, "max_abs_diff_vs_two_step": worst},
        "probe": {"texts": PROBE_TEXTS, "outputs": np.asarray(probe, np.float64)[:, :PROBE_VALUES].round(7).tolist()},
        "bytes": out_path.stat().st_size,
    }


def add_tokenizer_variants(export_dir: str | os.PathLike[str], check_texts: Sequence[str] = ()) -> dict[str, dict[str, Any]]:
    """Add single-file variants to an existing export directory (no TensorFlow needed).

    Builds and checks them as :func:`build_tokenizer_variants` does, then moves the files in and
    rewrites ``manifest.json`` atomically.

    Returns:
        the new manifest entries, by variant name.

    Raises:
        ExportDirError: a missing or broken export directory, or no onnxruntime-extensions.
        TokenizerGraphError: the tokenizer cannot go into the graph, or a check failed.
    """
    from ptmkit_export.manifest import MANIFEST_NAME, read_manifest

    root = Path(export_dir)
    manifest = read_manifest(root)
    with tempfile.TemporaryDirectory(prefix=".tokenizer-", dir=root) as tmp_name:
        tmp = Path(tmp_name)
        made = build_tokenizer_variants(
            root, manifest["variants"], root / manifest["tokenizer"], manifest["inputs"], manifest["outputs"][0]["name"],
            int(manifest["max_sequence_length"]), int(manifest["pad_token_id"]), check_texts, out_dir=tmp,
        )
        for entry in made.values():
            os.replace(tmp / entry["file"], root / entry["file"])
        manifest["variants"].update(made)
        staged = tmp / MANIFEST_NAME
        staged.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        os.replace(staged, root / MANIFEST_NAME)
    return made


def check_probe(session: Any, entry: dict[str, Any], output_name: str, model_path: Path) -> None:
    """Run the manifest's probe texts through a single-file ``session``; raise if the outputs moved.

    Guards against an environment whose string operators behave otherwise than at export time:
    onnxruntime-extensions' regular expressions (RE2) go wrong when TensorFlow is loaded in the same
    process (TensorFlow's own RE2 symbols take precedence: a pattern with a capture group no longer
    splits), and another onnxruntime-extensions version could differ too.

    Raises:
        ExportDirError: outputs differ by more than :data:`PROBE_TOLERANCE`.
    """
    probe = entry.get("probe")
    if not isinstance(probe, dict):
        return
    (got,) = session.run([output_name], {TEXT_INPUT: text_feed(probe["texts"])})
    expected = np.asarray(probe["outputs"], np.float64)
    worst = float(np.max(np.abs(np.asarray(got, np.float64)[:, : expected.shape[1]] - expected)))
    if worst > PROBE_TOLERANCE:
        loaded = " TensorFlow is loaded in this process, and its RE2 breaks onnxruntime-extensions' regular expressions;" if "tensorflow" in sys.modules else ""
        raise ExportDirError(
            f"{model_path}: gives other outputs on its probe texts than at export time (max abs difference {worst:.2e}):{loaded} "
            f"use the {entry.get('base', 'fp32')} variant (two-step) or a process without TensorFlow"
        )


def build_tokenizer_variants_isolated(latency_threads: int = 1, latency_repeats: int = 0, **arguments: Any) -> dict[str, dict[str, Any]]:
    """:func:`build_tokenizer_variants` in a fresh Python process, which loads no TensorFlow.

    ``ptmkit export`` has TensorFlow loaded, and onnxruntime-extensions' regular expressions
    misbehave next to it (see :func:`check_probe`); the checks must run where the model will.
    With ``latency_repeats > 0`` each entry also gets ``latency_ms_b1x128``: the median time of one
    text of ``min(128, max_sequence_length)`` tokens (tokenization included) through the
    single-file model with ``latency_threads`` threads, as the two-step variants are timed, and
    ``two_step_latency_ms_b1x128``: the same text through tokenizers and the base variant's model
    in the same process, right after.

    Args:
        arguments: :func:`build_tokenizer_variants`'s (paths as str or Path).

    Raises:
        TokenizerGraphError, ExportDirError: as :func:`build_tokenizer_variants`, re-raised here.
    """
    import subprocess

    request = {key: (str(value) if isinstance(value, Path) else value) for key, value in arguments.items()}
    request["check_texts"] = list(request.get("check_texts", ()))
    request["latency"] = [latency_threads, latency_repeats]
    with tempfile.TemporaryDirectory(prefix="ptmkit-tokenizer-graph-") as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "request.json").write_text(json.dumps(request, ensure_ascii=False), encoding="utf-8")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1]), *filter(None, [env.get("PYTHONPATH")])])
        process = subprocess.run(
            [sys.executable, "-m", "ptmkit_export.tokenizer_graph", str(tmp / "request.json"), str(tmp / "result.json")],
            capture_output=True, text=True, env=env, check=False,
        )
        if not (tmp / "result.json").is_file():
            last = (process.stderr.strip().splitlines() or ["no output"])[-1]
            raise TokenizerGraphError(f"building the tokenizer graph failed (exit {process.returncode}): {last}")
        result = json.loads((tmp / "result.json").read_text(encoding="utf-8"))
    if "error" in result:
        raise (ExportDirError if result["kind"] == "ExportDirError" else TokenizerGraphError)(result["error"])
    return dict(result["variants"])


def _main(argv: Sequence[str]) -> int:
    """``python -m ptmkit_export.tokenizer_graph REQUEST.json RESULT.json`` (see :func:`build_tokenizer_variants_isolated`)."""
    request = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    threads, repeats = request.pop("latency")
    try:
        made = build_tokenizer_variants(**request)
        if repeats:
            import onnxruntime as ort
            from tokenizers import Tokenizer

            from ptmkit_export.benchmark import median_latency_ms

            # One text of exactly min(128, max_sequence_length) tokens, as the two-step variants' timing.
            reference, words = Tokenizer.from_file(str(request["tokenizer_json"])), ["a"]
            target = min(128, int(request["max_sequence_length"]))
            while len(reference.encode(" ".join(words)).ids) < target and len(words) < 1000:
                words.append("a")
            feeds = {TEXT_INPUT: text_feed([" ".join(words)])}
            reference.enable_truncation(int(request["max_sequence_length"]))
            for entry in made.values():
                session = extensions_session(Path(request.get("out_dir") or request["directory"]) / entry["file"], threads=threads)
                options = ort.SessionOptions()
                options.intra_op_num_threads = threads
                base = ort.InferenceSession(str(Path(request["directory"]) / request["variants"][entry["base"]]["file"]), options, providers=["CPUExecutionProvider"])

                def two_step(texts: list[str], base: Any = base) -> Any:  # the Predictor's path: tokenizers, then the model
                    encodings = reference.encode_batch(texts)
                    return base.run(None, {s["name"]: np.asarray([getattr(e, s["encoding"]) for e in encodings], s["dtype"]) for s in request["inputs"]})

                entry["latency_ms_b1x128"] = round(median_latency_ms(session, feeds, repeats=repeats), 3)
                entry["two_step_latency_ms_b1x128"] = round(median_latency_ms(two_step, [" ".join(words)], repeats=repeats), 3)
        result: dict[str, Any] = {"variants": made}
    except (TokenizerGraphError, ExportDirError) as error:
        result = {"error": str(error), "kind": type(error).__name__}
    Path(argv[1]).write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
