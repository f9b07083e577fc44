"""The contract's types (ptmkit.contract), the fields shared with the runtime, the built-in
families' declarations and capabilities, and the rule that the core names no family."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest

from ptmkit.contract import (
    TOKENIZER_FIELDS,
    ClassifiesRows,
    InputSpec,
    KeepsLayers,
    ProvidesWordVectors,
    PrunesHeads,
    ReplacesModules,
    Resumable,
    SharesLayers,
    SpecialTokens,
    TrainsItself,
    TrainsOnWordVectors,
    capabilities,
)
from ptmkit.plugins import get_registry

REPO = Path(__file__).resolve().parents[1]


def test_special_tokens_are_a_mapping_of_optional_roles() -> None:
    specials = SpecialTokens({"pad": 0, "bos": 5}, eos=6)
    assert dict(specials) == {"pad": 0, "bos": 5, "eos": 6} and specials.bos == 5 and specials.cls is None
    assert specials.structural() == [0, 5, 6] and specials.padding_id == 0
    assert SpecialTokens(bos=1).padding_id == 0 and SpecialTokens(pad=3).padding_id == 3
    with pytest.raises(KeyError):
        specials["mask"]
    with pytest.raises(ValueError, match="unknown special-token role"):
        SpecialTokens(start=1)
    with pytest.raises(ValueError, match="non-negative int"):
        SpecialTokens(pad=-1)
    with pytest.raises(AttributeError):
        specials.colour  # noqa: B018


def test_input_spec_shapes_and_errors() -> None:
    chars = InputSpec("char_ids", ("batch", "sequence", "characters"), field="char_ids", sizes={"characters": 50})
    assert chars.shape == (None, 50) and InputSpec("token_ids").shape == (None,)
    with pytest.raises(ValueError, match="start with 'batch'"):
        InputSpec("x", ("sequence",))
    with pytest.raises(ValueError, match="does not have"):
        InputSpec("x", sizes={"characters": 5})


def test_fields_are_the_same_in_the_core_and_the_runtime() -> None:
    from ptmkit_export.fields import FIELDS, character_table, derive
    from ptmkit_export.manifest import ENCODINGS

    assert TOKENIZER_FIELDS == FIELDS == ENCODINGS
    # UTF-8 bytes + 1, 0-padded and cut; "##" dropped from WordPiece continuations.
    table = character_table(["[PAD]", "cat", "##s", "café"], 4)
    assert table.tolist() == [[92, 81, 66, 69], [100, 98, 117, 0], [116, 0, 0, 0], [100, 98, 103, 196]]
    ids, mask = np.array([[1, 3, 0]]), np.array([[1, 1, 0]])
    chars = derive("char_ids", ids, None, mask, characters=table)
    assert chars.shape == (1, 3, 4) and chars[0, 2].tolist() == [0, 0, 0, 0] and chars[0, 1].tolist() == table[3].tolist()
    assert derive("type_ids", ids, None, mask).tolist() == [[0, 0, 0]]
    with pytest.raises(ValueError, match="unknown input field"):
        derive("pixels", ids, None, mask)


def test_builtin_families_declare_and_keep_their_capabilities() -> None:
    registry = get_registry()
    bert = registry.family("bert")
    assert bert.input_names == ("token_ids", "segment_ids", "padding_mask")
    assert [s.field for s in bert.inputs] == ["ids", "type_ids", "attention_mask"]
    assert capabilities(bert) == {"sequence_output", "pooled_output", "token_embedding", "self_attention_mask", "positions_and_languages"}
    assert isinstance(bert, KeepsLayers) and isinstance(bert, PrunesHeads) and isinstance(bert, ReplacesModules) and isinstance(bert, SharesLayers)
    assert not isinstance(registry.family("albert"), SharesLayers)
    assert bert.graph_optimizer(registry.family("bert").config_class()) == ("bert", 4, 256) and not isinstance(bert, TrainsItself)
    for name in ("word2vec", "glove", "fasttext", "nnlm"):
        family = registry.family(name)
        assert isinstance(family, Resumable) and isinstance(family, ProvidesWordVectors) and not isinstance(family, ClassifiesRows)
        assert registry.heads_for(family) == ["fasttext"] and registry.objectives_for(family) == []
    supervised = registry.family("fasttext-supervised")
    assert isinstance(supervised, TrainsItself) and isinstance(supervised, ClassifiesRows) and not isinstance(supervised, Resumable)
    assert isinstance(registry.head("fasttext"), TrainsOnWordVectors) and not isinstance(registry.head("classification"), TrainsOnWordVectors)


def test_contract_imports_nothing_above_itself() -> None:
    tree = ast.parse((REPO / "ptmkit" / "contract.py").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    ptmkit_modules = {m for m in imported if m.split(".")[0] == "ptmkit"}
    assert ptmkit_modules <= {"ptmkit.errors", "ptmkit.wordvectors"}  # ptmkit.wordvectors: for type hints only
    type_checking_only = {"ptmkit.wordvectors"}
    runtime = [n for n in tree.body if isinstance(n, ast.ImportFrom) and (n.module or "") in type_checking_only]
    assert not runtime


# Where the core may name a family or a tool: the quickstart's choice of family, and the file
# formats named after the tools that defined them (word2vec text/binary, GloVe text, fastText .vec
# and __label__ files), and WordPiece, whose tokenizers components bear the name of the model that
# introduced it (BertNormalizer, BertPreTokenizer, BertProcessing). Docstrings, comments, help
# texts and descriptions are documentation. TinyBERT names a distillation method (``finetune
# --distill tinybert``, Jiao et al. 2020) that the core applies to any family exposing its
# attention, not a family.
FORMAT_MODULES = {"ptmkit/quickstart.py", "ptmkit/wordvectors/formats.py", "ptmkit/data/readers.py", "ptmkit/data/wordpiece.py"}
FAMILY = re.compile(r"(?<!tiny)bert|word2vec|fasttext|glove|nnlm", re.IGNORECASE)


def _documentation(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            ids.add(id(body[0].value))  # a docstring
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            ids.add(id(node.value))  # a bare string statement: an attribute docstring
        if isinstance(node, ast.keyword) and node.arg == "help":
            ids |= {id(n) for n in ast.walk(node.value)}
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "description" for t in node.targets):
            ids |= {id(n) for n in ast.walk(node.value)}
    return ids


def test_core_code_names_no_model_family() -> None:
    found = []
    for path in sorted((REPO / "ptmkit").rglob("*.py")):
        relative = path.relative_to(REPO).as_posix()
        if relative in FORMAT_MODULES:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = _documentation(tree)
        for node in ast.walk(tree):
            text = {ast.Name: "id", ast.Attribute: "attr", ast.FunctionDef: "name", ast.ClassDef: "name", ast.alias: "name", ast.arg: "arg"}.get(type(node))
            value = getattr(node, text) if text else (node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs else None)
            if value and FAMILY.search(value):
                found.append(f"{relative}:{getattr(node, 'lineno', '?')}: {value[:60]!r}")
    assert not found, "the core names a model family outside documentation:\n" + "\n".join(found)


def test_bert_passes_check_family(tmp_path: Path) -> None:
    from tinyconfig import TINY

    from ptmkit.testing import check_family

    bert = get_registry().family("bert")
    report = check_family(bert, tmp_path, overrides=[o for o in TINY if o.startswith("model.")])
    assert report["outputs"] == {"sequence_output": (2, 7, 32), "pooled_output": (2, 32)}
    assert report["parity_max_abs_diff"] < 1e-4 and report["runtime_max_abs_diff"] < 1e-4
