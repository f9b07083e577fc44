"""ptmkit.config through ``resolve_config``: defaults, TOML files, ``--set`` overrides, errors
that name the file and the full dotted key, and the ``config.toml`` round trip."""

from __future__ import annotations

import dataclasses
import tomllib
import types
from pathlib import Path
from typing import Any

import pytest

from ptmkit import hookimpl
from ptmkit.config import FinetuneConfig, TrainConfig, apply_overrides, field_docs, parse_override, read_toml, to_toml
from ptmkit.contract import Objective
from ptmkit.errors import ConfigError, PluginError
from ptmkit.plugins import PluginInfo, Registry, get_registry
from ptmkit.training.pretrain import describe_config, resolve_config


@pytest.fixture(scope="module")
def registry() -> Registry:
    return get_registry()


def resolve(registry: Registry, path: Path | None = None, *overrides: str, base: dict | None = None):
    return resolve_config(registry, "bert", path, list(overrides), base=base)


def toml_file(tmp_path: Path, text: str, name: str = "run.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def config_error(registry: Registry, path: Path | None = None, *overrides: str) -> str:
    with pytest.raises(ConfigError) as info:
        resolve(registry, path, *overrides)
    message = str(info.value)
    assert "\n" not in message
    return message


# -- defaults, files, overrides ----------------------------------------------------------------


def test_defaults(registry: Registry) -> None:
    config = resolve(registry)
    assert config.family == "bert"
    assert config.train == TrainConfig()
    assert config.finetune == FinetuneConfig()
    assert (config.train.max_steps, config.train.batch_size, config.train.learning_rate) == (300, 32, 1e-3)
    assert config.train.objectives == []
    model = config.model
    assert (model.vocabulary_size, model.num_layers, model.num_heads, model.hidden_dim) == (8000, 4, 4, 256)
    assert model.lowercase is True
    assert sorted(config.objectives) == ["bilm", "clm", "mlm", "nsp", "plm", "rtd", "sop", "span", "sso", "tlm", "unilm", "wso"]  # every installed objective's section is known (clm, bilm: the gpt and elmo plugins')
    assert config.objectives["mlm"].mask_rate == 0.15
    assert config.finetune.head == "classification"
    assert config.head.dropout == 0.1


def test_toml_file_values_and_untouched_defaults(registry: Registry, tmp_path: Path) -> None:
    path = toml_file(
        tmp_path,
        """
family = "bert"
[model]
hidden_dim = 64
num_heads = 2
lowercase = false
[train]
max_steps = 7
learning_rate = 1e-3
warmup_ratio = 0
objectives = ["mlm", "nsp"]
[objectives.mlm]
mask_rate = 0.2
[finetune]
epochs = 1
[head]
dropout = 0.0
""",
    )
    config = resolve(registry, path)
    assert (config.model.hidden_dim, config.model.num_heads, config.model.lowercase) == (64, 2, False)
    assert config.model.num_layers == 4  # not in the file: the default
    assert (config.train.max_steps, config.train.learning_rate, config.train.objectives) == (7, 1e-3, ["mlm", "nsp"])
    assert config.train.warmup_ratio == 0.0 and isinstance(config.train.warmup_ratio, float)
    assert config.train.batch_size == 32
    assert config.objectives["mlm"].mask_rate == 0.2
    assert config.objectives["mlm"].mask_token_rate == 0.8
    assert config.finetune.epochs == 1
    assert config.head.dropout == 0.0


@pytest.mark.parametrize(
    ("override", "section", "key", "expected"),
    [
        ("train.max_steps=123", "train", "max_steps", 123),
        ("train.learning_rate=2e-4", "train", "learning_rate", 2e-4),
        ("train.learning_rate=1", "train", "learning_rate", 1.0),
        ("train.jit_compile=true", "train", "jit_compile", True),
        ("model.lowercase=false", "model", "lowercase", False),
        ("finetune.head=classification", "finetune", "head", "classification"),
        ('finetune.head="classification"', "finetune", "head", "classification"),
        ("train.objectives=mlm,nsp", "train", "objectives", ["mlm", "nsp"]),
        ('train.objectives=["nsp"]', "train", "objectives", ["nsp"]),
        (" train.seed = 7 ", "train", "seed", 7),
        ("train.mixed_precision=bf16", "train", "mixed_precision", "mixed_bfloat16"),
        ("train.mixed_precision=true", "train", "mixed_precision", "mixed_float16"),
        ("train.mixed_precision=false", "train", "mixed_precision", "float32"),
        ("finetune.mixed_precision=fp16", "finetune", "mixed_precision", "mixed_float16"),
        ("finetune.mixed_precision=mixed_bfloat16", "finetune", "mixed_precision", "mixed_bfloat16"),
    ],
)
def test_set_overrides_are_typed(registry: Registry, override: str, section: str, key: str, expected: object) -> None:
    config = resolve(registry, None, override)
    value = getattr(getattr(config, section), key)
    assert value == expected
    assert type(value) is type(expected)


def test_set_wins_over_the_file_and_the_last_set_wins(registry: Registry, tmp_path: Path) -> None:
    path = toml_file(tmp_path, "[train]\nmax_steps = 7\nbatch_size = 8\n")
    config = resolve(registry, path, "train.max_steps=9", "train.max_steps=11")
    assert (config.train.max_steps, config.train.batch_size) == (11, 8)


def test_file_is_merged_over_a_base_config(registry: Registry, tmp_path: Path) -> None:
    base = resolve(registry, None, "train.max_steps=5", "model.hidden_dim=128").to_dict()
    path = toml_file(tmp_path, "[train]\nbatch_size = 4\n")
    config = resolve(registry, path, base=base)
    assert (config.train.max_steps, config.train.batch_size, config.model.hidden_dim) == (5, 4, 128)


def test_apply_overrides_leaves_its_input_alone() -> None:
    data = {"train": {"max_steps": 3}}
    assert apply_overrides(data, ["train.max_steps=4", "model.num_layers=2"]) == {
        "train": {"max_steps": 4},
        "model": {"num_layers": 2},
    }
    assert data == {"train": {"max_steps": 3}}


def test_parse_override_reads_toml_literals_else_strings() -> None:
    assert parse_override("a.b=3") == (["a", "b"], 3)
    assert parse_override("a.b=3.5") == (["a", "b"], 3.5)
    assert parse_override("a.b=true") == (["a", "b"], True)
    assert parse_override("a.b=x,y") == (["a", "b"], "x,y")
    assert parse_override("a.b=") == (["a", "b"], "")


# -- unknown keys and sections -----------------------------------------------------------------


def test_unknown_key_via_set_names_the_dotted_key_and_suggests(registry: Registry) -> None:
    message = config_error(registry, None, "train.max_stpes=3")
    assert message == "--set: unknown config key 'train.max_stpes' (did you mean 'train.max_steps'?)"


def test_unknown_key_in_a_file_names_the_file(registry: Registry, tmp_path: Path) -> None:
    path = toml_file(tmp_path, "[train]\nmax_steps = 3\nlearning_rte = 0.1\n")
    message = config_error(registry, path)
    assert message == f"{path}: unknown config key 'train.learning_rte' (did you mean 'train.learning_rate'?)"


def test_unknown_nested_objective_key(registry: Registry) -> None:
    message = config_error(registry, None, "objectives.mlm.mask_rat=0.2")
    assert "unknown config key 'objectives.mlm.mask_rat'" in message
    assert "did you mean 'objectives.mlm.mask_rate'" in message


def test_unknown_key_without_a_close_match_lists_the_known_keys(registry: Registry) -> None:
    message = config_error(registry, None, "head.zzzz=1")
    assert message == "--set: unknown config key 'head.zzzz' (known keys: dropout, freeze_backbone, initializer_range, layers, mix_layer_norm, pooling)"


def test_unknown_section(registry: Registry, tmp_path: Path) -> None:
    assert "unknown config key 'trian' (did you mean 'train'?)" in config_error(registry, None, "trian.max_steps=3")
    path = toml_file(tmp_path, "[bogus]\nx = 1\n")
    message = config_error(registry, path)
    assert message.startswith(f"{path}: unknown config key 'bogus'")
    assert "known keys: family, finetune, head, model, objectives, train" in message


def test_a_value_where_a_section_belongs_and_the_reverse(registry: Registry, tmp_path: Path) -> None:
    assert "'train' must be a section" in config_error(registry, None, "train=5")
    path = toml_file(tmp_path, "[train]\nmax_steps = 3\n")
    assert "'max_steps' is a value, not a section" in config_error(registry, path, "train.max_steps.x=1")


def test_set_without_equals(registry: Registry) -> None:
    assert config_error(registry, None, "train.max_steps").startswith("--set 'train.max_steps': expected KEY=VALUE")


# -- wrong types -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("train.max_steps=abc", "config key 'train.max_steps' must be int, got 'abc' (str)"),
        ("train.max_steps=true", "config key 'train.max_steps' must be int, got True (bool)"),
        ("train.max_steps=1.5", "config key 'train.max_steps' must be int, got 1.5 (float)"),
        ("model.num_layers=2.0", "config key 'model.num_layers' must be int, got 2.0 (float)"),
        ("train.jit_compile=1", "config key 'train.jit_compile' must be bool, got 1 (int)"),
        ("train.jit_compile=yes", "config key 'train.jit_compile' must be bool, got 'yes' (str)"),
        ("train.learning_rate=fast", "config key 'train.learning_rate' must be float, got 'fast' (str)"),
        ("train.learning_rate=false", "config key 'train.learning_rate' must be float, got False (bool)"),
        ("train.learning_rate=nan", "config key 'train.learning_rate' must be a finite number, got nan"),  # passes every "> 0" check
        ("train.warmup_ratio=-inf", "config key 'train.warmup_ratio' must be a finite number, got -inf"),
        ("finetune.head=3", "config key 'finetune.head' must be str, got 3 (int)"),
        ("train.objectives=[1, 2]", "config key 'train.objectives' must be str, got 1 (int)"),
        ("train.mixed_precision=16", "config key 'train.mixed_precision' must be bool or str, got 16 (int)"),
        ("train.mixed_precision=half", "train.mixed_precision must be one of float32, bf16, fp16 (or mixed_bfloat16, mixed_float16), got 'half'"),
    ],
)
def test_wrong_type_via_set(registry: Registry, override: str, expected: str) -> None:
    assert config_error(registry, None, override) == f"--set: {expected}"


def test_wrong_type_in_a_file_names_the_file(registry: Registry, tmp_path: Path) -> None:
    path = toml_file(tmp_path, '[train]\nmax_steps = "300"\n')
    assert config_error(registry, path) == f"{path}: config key 'train.max_steps' must be int, got '300' (str)"
    path = toml_file(tmp_path, "[model]\nlowercase = 1\n", "b.toml")
    assert config_error(registry, path) == f"{path}: config key 'model.lowercase' must be bool, got 1 (int)"


# -- files that are not TOML ------------------------------------------------------------------------


def test_invalid_toml_names_the_file_and_line(registry: Registry, tmp_path: Path) -> None:
    path = toml_file(tmp_path, "[train]\nmax_steps = = 3\n")
    message = config_error(registry, path)
    assert message.startswith(f"{path}: invalid TOML: ")
    assert "line 2" in message


def test_missing_config_file(registry: Registry, tmp_path: Path) -> None:
    assert config_error(registry, tmp_path / "none.toml") == f"{tmp_path / 'none.toml'}: config file not found"


def test_read_toml_of_binary_garbage(tmp_path: Path) -> None:
    path = tmp_path / "garbage.toml"
    path.write_bytes(b"\x00\xff\xfe not toml")
    with pytest.raises(ConfigError, match=r"garbage\.toml: invalid TOML: not UTF-8"):
        read_toml(path)


def test_a_directory_as_config_file(registry: Registry, tmp_path: Path) -> None:
    assert config_error(registry, tmp_path).startswith(f"{tmp_path}: cannot read the config file")


# -- value validation -------------------------------------------------------------------------------


def test_num_heads_must_divide_hidden_dim(registry: Registry, tmp_path: Path) -> None:
    message = config_error(registry, None, "model.hidden_dim=30")
    assert "config key 'model.num_heads' = 4 must divide 'model.hidden_dim' = 30" in message
    path = toml_file(tmp_path, "[model]\nhidden_dim = 96\nnum_heads = 5\n")
    message = config_error(registry, path)
    assert message == f"{path}: config key 'model.num_heads' = 5 must divide 'model.hidden_dim' = 96"


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("train.max_steps=0", "config key 'train.max_steps' must be > 0, got 0"),
        ("train.batch_size=-4", "config key 'train.batch_size' must be > 0, got -4"),
        ("train.warmup_ratio=1.5", "config key 'train.warmup_ratio' must be in [0, 1], got 1.5"),
        ("finetune.epochs=0", "config key 'finetune.epochs' must be > 0, got 0"),
        ("model.dropout=1.0", "config key 'model.dropout' must be in [0, 1), got 1.0"),
        ("model.vocabulary_size=0", "config key 'model.vocabulary_size' must be > 0, got 0"),
        ("head.dropout=-0.1", "config key 'head.dropout' must be in [0, 1), got -0.1"),
        ("head.initializer_range=0", "config key 'head.initializer_range' must be > 0, got 0.0"),
        ("objectives.mlm.mask_rate=2", "config key 'objectives.mlm.mask_rate' must be in [0, 1], got 2.0"),
    ],
)
def test_out_of_range_values(registry: Registry, override: str, expected: str) -> None:
    assert config_error(registry, None, override) == f"--set: {expected}"


def test_unknown_objective_and_head(registry: Registry) -> None:
    message = config_error(registry, None, "train.objectives=mlm,nsq")
    assert message.startswith("--set: unknown objective 'nsq'")
    assert "did you mean 'nsp'" in message
    message = config_error(registry, None, "finetune.head=classificaton")
    assert "unknown head" in message and "did you mean 'classification'" in message


def test_family_in_the_file_must_match_the_command(registry: Registry, tmp_path: Path) -> None:
    path = toml_file(tmp_path, 'family = "gpt"\n')
    assert config_error(registry, path) == f"{path}: family = 'gpt' but the command trains 'bert'"


def test_unknown_family_lists_the_installed_ones(registry: Registry) -> None:
    with pytest.raises(PluginError) as info:
        resolve_config(registry, "gpt9")
    assert str(info.value).startswith("unknown model family 'gpt9'; installed: ")
    assert "bert" in str(info.value)


@dataclasses.dataclass
class _CausalConfig:
    window: int = 8


class _CausalLM(Objective):
    name = "causal"
    requires = frozenset({"decoder_output"})
    config_class = _CausalConfig


def test_objective_the_backbone_does_not_provide(tmp_path: Path) -> None:
    plugin = types.ModuleType("ptmkit_test_causal")

    @hookimpl
    def ptmkit_objectives() -> list[Objective]:
        return [_CausalLM()]

    plugin.ptmkit_objectives = ptmkit_objectives
    registry = Registry.load()
    registry.register(plugin, PluginInfo("causal", "ptmkit-test-causal", "0", plugin.__name__))
    assert "causal" in registry.objectives and "causal" not in registry.objectives_for(registry.family("bert"))

    with pytest.raises(ConfigError) as info:
        resolve_config(registry, "bert", None, ["train.objectives=mlm,causal"])
    message = str(info.value)
    assert message.startswith("--set: objective 'causal' needs ['decoder_output'], which the bert backbone does not provide")
    assert "it supports ['mlm', 'nsp', 'rtd', 'sop', 'span', 'sso', 'tlm', 'unilm', 'wso']" in message
    # Its config section is still checked and known once the plugin is installed.
    assert resolve_config(registry, "bert", None, ["objectives.causal.window=4"]).objectives["causal"].window == 4


# -- config.toml round trip -------------------------------------------------------------------------


def test_to_toml_round_trip_of_the_defaults(registry: Registry) -> None:
    data = resolve(registry).to_dict()
    assert tomllib.loads(to_toml(data)) == data


def test_to_toml_round_trip_of_a_changed_config_and_rebuild(registry: Registry) -> None:
    config = resolve(
        registry,
        None,
        "train.objectives=mlm,nsp",
        "train.learning_rate=1e-05",
        "train.mixed_precision=true",
        "model.hidden_dim=64",
        "model.num_heads=2",
        "objectives.nsp.random_next_rate=0.25",
    )
    data = config.to_dict()
    text = to_toml(data)
    parsed = tomllib.loads(text)
    assert parsed == data
    assert "[objectives.nsp]\nrandom_next_rate = 0.25" in text
    rebuilt = resolve_config(registry, "bert", None, None, base=parsed)  # what finetune does with config.toml
    assert rebuilt.to_dict() == data


def test_to_toml_escapes_quotes_backslashes_and_control_characters() -> None:
    data = {"family": "bert", "x": {"s": 'say "hi" \\ tab\there\nnew line \x01 \x7f é', "n": [1, 2], "empty": []}}
    assert tomllib.loads(to_toml(data)) == data


def test_to_toml_refuses_none_inside_lists() -> None:
    with pytest.raises(ConfigError, match="TOML has no null"):
        to_toml({"a": {"b": [None]}})


def test_set_error_is_not_blamed_on_the_config_file(registry: Registry, tmp_path: Path) -> None:
    path = toml_file(tmp_path, "[train]\nmax_steps = 3\n")
    message = config_error(registry, path, "train.max_stpes=4")
    assert str(path) not in message
    assert message == "--set: unknown config key 'train.max_stpes' (did you mean 'train.max_steps'?)"


# -- `ptmkit config FAMILY`: the commented TOML a user starts from --------------------------------


def test_every_config_key_of_every_installed_section_is_documented(registry: Registry) -> None:
    """`ptmkit config` comments each key from its class's Attributes section: none may be missing."""
    classes = {f"family {n}": f.config_class for n, f in registry.families.items()}
    classes |= {f"objective {n}": o.config_class for n, o in registry.objectives.items()}
    classes |= {f"head {n}": h.config_class for n, h in registry.heads.items()}
    classes["train"] = TrainConfig
    missing = {
        where: [f.name for f in dataclasses.fields(cls) if f.name not in field_docs(cls)]
        for where, cls in classes.items()
    }
    finetune_docs = field_docs(TrainConfig) | field_docs(FinetuneConfig)
    missing["finetune"] = [f.name for f in dataclasses.fields(FinetuneConfig) if f.name not in finetune_docs]
    assert not {where: names for where, names in missing.items() if names}


def test_field_docs_joins_continuation_lines_and_strips_rest_markup() -> None:
    @dataclasses.dataclass
    class Example:
        """Title.

        Attributes:
            alpha: first line
                continues here, see :class:`ptmkit.config.TrainConfig`.
            beta: ``b`` only.

        Raises:
            ConfigError: not an attribute.
        """

        alpha: int = 1
        beta: int = 2

    assert field_docs(Example) == {"alpha": "first line continues here, see `ptmkit.config.TrainConfig`.", "beta": "`b` only."}


ATTRIBUTE_DOCS_PLUGIN = '''
import dataclasses

import ptmkit
from ptmkit.contract import ModelFamily


@dataclasses.dataclass
class BagConfig:
    """A family whose fields document themselves.

    Attributes:
        rows: from the Attributes section.
        width: the section's words, which the field's own docstring replaces.
    """

    rows: int = 3
    width: int = 16
    """Hidden width in units,
    wrapped over two lines."""
    epochs: int = 5
    """Passes over the corpus."""


class BagFamily(ModelFamily):
    name = "bag"
    config_class = BagConfig
    trains_itself = True


@ptmkit.hookimpl
def ptmkit_model_families():
    return [BagFamily()]
'''


def test_a_fields_own_docstring_is_shown_by_ptmkit_config(tmp_path: Path) -> None:
    """Attribute docstrings (the string under a field, as Sphinx and mkdocstrings read them) of
    an installed plugin's config, next to an Attributes section, in `ptmkit config`."""
    from test_plugins import make_distribution, run_cli

    site = make_distribution(tmp_path / "site", "ptmkit-bag", "ptmkit_bag", ATTRIBUTE_DOCS_PLUGIN, entry_name="bag")
    result = run_cli("config", "bag", path=[site])
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[lines.index("rows = 3") - 1] == "# from the Attributes section."
    assert lines[lines.index("width = 16") - 1] == "# Hidden width in units, wrapped over two lines."
    assert lines[lines.index("epochs = 5") - 1] == "# Passes over the corpus."


@pytest.mark.parametrize("family", ["bert", "word2vec", "fasttext", "fasttext-supervised", "glove", "nnlm"])
def test_describe_config_is_a_config_file_that_gives_back_the_same_config(registry: Registry, family: str, tmp_path: Path) -> None:
    text = describe_config(registry, family, None, ["model.min_count=3"] if family != "bert" else ["train.max_steps=7"])
    path = toml_file(tmp_path, text)
    data = tomllib.loads(text)
    assert data["family"] == family and "model" in data and "finetune" not in data and "head" not in data
    assert ("train" in data) == (family == "bert")  # word-vector families read [model] only
    rebuilt = resolve_config(registry, family, path, [])
    expected = resolve_config(registry, family, None, ["model.min_count=3"] if family != "bert" else ["train.max_steps=7"])
    assert rebuilt.to_dict() == expected.to_dict()
    doc = field_docs(registry.family(family).config_class)
    first_key = next(iter(data["model"]))
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(f"{first_key} = "))
    assert lines[at - 1].startswith("# ") and doc[first_key].split()[-1] in lines[at - 1]  # the comment sits above its key


def test_describe_config_for_finetuning_prints_the_fitting_head_and_no_model(registry: Registry) -> None:
    bert = tomllib.loads(describe_config(registry, "bert", None, [], finetune=True))
    assert set(bert) == {"family", "finetune", "head"} and bert["finetune"]["head"] == "classification"
    assert "initializer_range" in bert["head"] and "epochs" in bert["finetune"]
    word2vec = tomllib.loads(describe_config(registry, "word2vec", None, ["head.epochs=3"], finetune=True))
    assert word2vec["finetune"] == {"head": "fasttext"} and word2vec["head"]["epochs"] == 3  # the head trains itself
    with pytest.raises(ConfigError, match="no fine-tune head fits fasttext-supervised runs"):
        describe_config(registry, "fasttext-supervised", None, [], finetune=True)


@pytest.mark.parametrize(
    ("text", "section"),
    [("[train]\nmax_steps = 2\n", "train"), ("[objectives.mlm]\nmask_rate = 0.5\n", "objectives")],
)
def test_core_training_sections_are_refused_for_families_that_train_themselves(registry: Registry, tmp_path: Path, text: str, section: str) -> None:
    path = toml_file(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        resolve_config(registry, "word2vec", path, [])
    assert str(info.value) == (
        f"{path}: [{section}] is for the core's pre-training loop; the word2vec family takes its training keys in [model] "
        "(`ptmkit config word2vec` lists them)"
    )
    with pytest.raises(ConfigError, match=r"^--set: \[train\] is for the core's pre-training loop"):
        resolve_config(registry, "glove", None, ["train.max_steps=2"])


def test_a_family_sets_objective_defaults_under_the_file_and_set() -> None:
    """:attr:`ModelFamily.objective_defaults` start its runs' ``[objectives.NAME]`` sections; the
    config file and ``--set`` still override them, and other families keep the objective's own."""
    from ptmkit_bert import BertFamily

    class NgramBert(BertFamily):
        name = "ngram-bert"
        objective_defaults = {"mlm": {"max_ngram": 3, "whole_word": True}}

    plugin = types.ModuleType("ptmkit_test_ngram")

    @hookimpl
    def ptmkit_model_families() -> list[Any]:
        return [NgramBert()]

    plugin.ptmkit_model_families = ptmkit_model_families  # type: ignore[attr-defined]
    registry = Registry.load()
    registry.register(plugin, PluginInfo("ngram", "ptmkit-test-ngram", "0", plugin.__name__))
    mlm = resolve_config(registry, "ngram-bert").objectives["mlm"]
    assert (mlm.max_ngram, mlm.whole_word, mlm.mask_rate) == (3, True, 0.15)
    assert resolve_config(registry, "ngram-bert", None, ["objectives.mlm.max_ngram=2"]).objectives["mlm"].max_ngram == 2
    assert resolve_config(registry, "bert").objectives["mlm"].max_ngram == 1


def test_a_family_sets_train_defaults_under_the_file_and_set(tmp_path: Path) -> None:
    """:attr:`ModelFamily.train_defaults` start its runs' ``[train]`` section; the config file and
    ``--set`` still override them, and other families keep the core's defaults."""
    from ptmkit_bert import BertFamily

    class FastBert(BertFamily):
        name = "fast-bert"
        train_defaults = {"learning_rate": 0.01, "schedule": "slanted_triangular"}

    plugin = types.ModuleType("ptmkit_test_fast")

    @hookimpl
    def ptmkit_model_families() -> list[Any]:
        return [FastBert()]

    plugin.ptmkit_model_families = ptmkit_model_families  # type: ignore[attr-defined]
    registry = Registry.load()
    registry.register(plugin, PluginInfo("fast", "ptmkit-test-fast", "0", plugin.__name__))
    train = resolve_config(registry, "fast-bert").train
    assert (train.learning_rate, train.schedule, train.max_steps) == (0.01, "slanted_triangular", TrainConfig().max_steps)
    assert resolve_config(registry, "fast-bert", None, ["train.learning_rate=0.002"]).train.learning_rate == 0.002
    path = toml_file(tmp_path, "[train]\nschedule = 'linear'\n")
    assert resolve_config(registry, "fast-bert", path, []).train.schedule == "linear"
    assert resolve_config(registry, "bert").train.learning_rate == TrainConfig().learning_rate
