"""Plugin discovery through real entry points of out-of-tree distributions (a dist-info on
sys.path, as pip would install it), fault isolation, de-duplication and conflicts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ptmkit.plugins import Registry

FOO_PLUGIN = '''
import ptmkit
from ptmkit.contract import POOLED_OUTPUT, CorpusReader, Head, ModelFamily, Objective, Record


class FooConfig:
    pass


class FooFamily(ModelFamily):
    name = "foo"
    description = "a family from an out-of-tree plugin"
    config_class = FooConfig
    provides = frozenset({POOLED_OUTPUT})


def read_reversed(stream, source):
    for number, line in enumerate(stream, 1):
        if line.strip():
            yield Record(number, line.strip()[::-1], None)


@ptmkit.hookimpl
def ptmkit_model_families():
    return [FooFamily()]


class SentenceOrder(Objective):
    name = "foo_order"
    requires = frozenset({POOLED_OUTPUT})
    config_class = FooConfig


class Regression(Head):
    name = "regression"
    requires = frozenset({"span_output"})
    config_class = FooConfig


@ptmkit.hookimpl
def ptmkit_objectives():
    return [SentenceOrder()]


@ptmkit.hookimpl
def ptmkit_heads():
    return [Regression()]


@ptmkit.hookimpl
def ptmkit_corpus_readers():
    return [CorpusReader("reversed", (".rev",), read_reversed)]


@ptmkit.hookimpl
def ptmkit_register_commands(cli):
    @cli.command()
    def hello(name: str = "world"):
        """Say hello (a command added by a plugin)."""
        print(f"hello {name} from foo")
'''


def make_distribution(root: Path, dist: str, module: str, source: str, entry_name: str | None = None, version: str = "1.0") -> Path:
    """Write ``module.py`` and ``dist-VERSION.dist-info`` with a ``ptmkit.plugins`` entry point."""
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[ptmkit.plugins]\n{entry_name or module} = {module}\n")
    return root


def run_cli(*args: str, path: list[Path], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # After this checkout's paths (tests/conftest.py puts them on PYTHONPATH), so that the CLI is this checkout's.
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([*filter(None, [os.environ.get("PYTHONPATH")]), *map(str, path)]), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "ptmkit.cli", *args], capture_output=True, text=True, env=environment, timeout=120
    )


def plugins_json(result: subprocess.CompletedProcess[str]) -> dict[str, dict]:
    assert result.returncode == 0, result.stderr
    return {p["name"]: p for p in json.loads(result.stdout)}


def test_builtin_plugins_are_listed_with_what_they_provide() -> None:
    registry = Registry.load()
    info = {p.name: p for p in registry.plugins}
    assert info["ptmkit"].objectives == ["mlm", "nsp", "sop", "span", "rtd", "wso", "sso", "unilm", "tlm", "plm"]
    assert info["ptmkit"].heads == ["classification"]
    assert set(info["ptmkit"].readers) == {"text", "fasttext", "tsv", "csv", "jsonl"}
    # ptmkit_bert comes in through its entry point, exactly like a third-party plugin.
    assert info["bert"].families == ["bert"] and info["bert"].distribution == "ptmkit"
    assert info["bert"].hooks == ["ptmkit_model_families"]  # import-hf is the core's, handed to the family by hf_model_types
    assert registry.objectives_for(registry.family("bert")) == ["mlm", "nsp", "rtd", "sop", "span", "sso", "tlm", "unilm", "wso"]
    assert registry.heads_for(registry.family("bert")) == ["classification"]


def test_out_of_tree_plugin_is_discovered_through_its_entry_point(tmp_path: Path) -> None:
    site = make_distribution(tmp_path / "site", "ptmkit-foo", "ptmkit_foo", FOO_PLUGIN, entry_name="foo")
    plugins = plugins_json(run_cli("plugins", "--json", path=[site]))
    assert plugins["foo"]["distribution"] == "ptmkit-foo"
    assert plugins["foo"]["version"] == "1.0"
    assert plugins["foo"]["families"] == ["foo"]
    assert plugins["foo"]["readers"] == ["reversed"]
    assert plugins["foo"]["objectives"] == ["foo_order"] and plugins["foo"]["heads"] == ["regression"]
    assert set(plugins["foo"]["hooks"]) == {
        "ptmkit_model_families", "ptmkit_objectives", "ptmkit_heads", "ptmkit_corpus_readers", "ptmkit_register_commands"
    }
    assert plugins["bert"]["ok"] is True


def test_objectives_and_heads_serve_every_family_that_provides_their_inputs(tmp_path: Path) -> None:
    site = make_distribution(tmp_path / "site", "ptmkit-foo", "ptmkit_foo", FOO_PLUGIN, entry_name="foo")
    code = (
        "from ptmkit.plugins import get_registry; r = get_registry(); "
        "print(r.objectives_for(r.family('bert')), r.heads_for(r.family('bert')), r.objectives_for(r.family('foo')))"
    )
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([*filter(None, [os.environ.get("PYTHONPATH")]), str(site)])}  # this checkout first
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environment, timeout=60)
    assert result.returncode == 0, result.stderr
    # The plugin's objective needs only pooled_output: BERT gets it. Its head needs an output BERT
    # does not provide, so BERT does not list it; foo's backbone lacks mlm's sequence_output.
    assert result.stdout.strip() == "['foo_order', 'mlm', 'nsp', 'rtd', 'sop', 'span', 'sso', 'tlm', 'unilm', 'wso'] ['classification'] ['foo_order', 'nsp', 'sop', 'sso']"


def test_plugin_commands_are_added_to_the_cli(tmp_path: Path) -> None:
    site = make_distribution(tmp_path / "site", "ptmkit-foo", "ptmkit_foo", FOO_PLUGIN, entry_name="foo")
    result = run_cli("hello", "--name", "ptmkit", path=[site])
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "hello ptmkit from foo"


def test_plugin_corpus_reader_is_chosen_by_suffix(tmp_path: Path) -> None:
    site = make_distribution(tmp_path / "site", "ptmkit-foo", "ptmkit_foo", FOO_PLUGIN, entry_name="foo")
    corpus = tmp_path / "corpus.rev"
    corpus.write_text("olleh\n\ndlrow\n")
    code = f"from ptmkit.data.readers import read_corpus; print(list(read_corpus({str(corpus)!r})))"
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([*filter(None, [os.environ.get("PYTHONPATH")]), str(site)])}  # this checkout first
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environment, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['hello', 'world']"


def test_broken_plugin_is_skipped_with_a_warning_and_listed(tmp_path: Path) -> None:
    site = make_distribution(tmp_path / "site", "ptmkit-broken", "ptmkit_broken", "raise ImportError('needs libfoo 2')\n", entry_name="broken")
    result = run_cli("plugins", "--json", path=[site])
    plugins = plugins_json(result)
    assert plugins["broken"]["ok"] is False
    assert plugins["broken"]["error"] == "ImportError: needs libfoo 2"
    assert plugins["broken"]["distribution"] == "ptmkit-broken"
    assert plugins["bert"]["ok"] is True  # every other plugin still works
    # Another command warns once, on one line naming plugin, distribution and exception.
    result = run_cli("train", "nope", "--corpus", "x", "--out", str(tmp_path / "run"), path=[site])
    warning = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1
    assert "'broken'" in warning[0] and "ptmkit-broken 1.0" in warning[0] and "ImportError: needs libfoo 2" in warning[0]
    assert "unknown model family 'nope'; installed: albert, bert" in result.stderr


def test_strict_mode_reraises_a_broken_plugin(tmp_path: Path) -> None:
    site = make_distribution(tmp_path / "site", "ptmkit-broken", "ptmkit_broken", "raise ImportError('needs libfoo 2')\n", entry_name="broken")
    result = run_cli("plugins", path=[site], env={"PTMKIT_STRICT_PLUGINS": "1"})
    assert result.returncode != 0
    assert "ImportError: needs libfoo 2" in result.stderr


def test_disabled_plugins_and_autoload_switch(tmp_path: Path) -> None:
    site = make_distribution(tmp_path / "site", "ptmkit-broken", "ptmkit_broken", "raise ImportError('x')\n", entry_name="broken")
    plugins = plugins_json(run_cli("plugins", "--json", path=[site], env={"PTMKIT_DISABLED_PLUGINS": "broken"}))
    assert "broken" not in plugins and "bert" in plugins
    plugins = plugins_json(run_cli("plugins", "--json", path=[site], env={"PTMKIT_DISABLE_PLUGIN_AUTOLOAD": "1"}))
    assert list(plugins) == ["ptmkit"]


def test_same_distribution_twice_on_sys_path_registers_once(tmp_path: Path) -> None:
    site = make_distribution(tmp_path / "lib" / "site", "ptmkit-foo", "ptmkit_foo", FOO_PLUGIN, entry_name="foo")
    (tmp_path / "lib64").symlink_to(tmp_path / "lib")  # what a lib64 -> lib symlink does
    plugins = json.loads(run_cli("plugins", "--json", path=[site, tmp_path / "lib64" / "site"]).stdout)
    assert [p["name"] for p in plugins].count("foo") == 1


def test_a_family_name_clash_breaks_that_family_only(tmp_path: Path) -> None:
    """A third-party distribution that also names a family word2vec (faked as installed: a
    dist-info with an entry point on PYTHONPATH): `ptmkit plugins` lists the clash and exits 0,
    other families work, and only using word2vec fails, naming both distributions."""
    source = FOO_PLUGIN.replace('name = "foo"', 'name = "word2vec"').split("\n\n\nclass SentenceOrder")[0]  # the family and reader only
    source += "\n\n@ptmkit.hookimpl\ndef ptmkit_corpus_readers():\n    return [CorpusReader('reversed', ('.rev',), read_reversed)]\n"
    site = make_distribution(tmp_path / "site", "ptmkit-otherw2v", "ptmkit_otherw2v", source, entry_name="otherw2v")
    listed = run_cli("plugins", path=[site])
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.count("clash: family 'word2vec'") == 2  # in the rows of both plugins
    plugins = plugins_json(run_cli("plugins", "--json", path=[site]))
    assert plugins["otherw2v"]["conflicts"] == ["family 'word2vec'"] and plugins["word2vec"]["conflicts"] == ["family 'word2vec'"]
    assert plugins["otherw2v"]["readers"] == ["reversed"]  # its other names are registered
    assert "word2vec" not in plugins["word2vec"]["families"]

    assert run_cli("config", "bert", path=[site]).returncode == 0
    used = run_cli("config", "word2vec", path=[site])
    assert used.returncode == 2
    (line,) = [line for line in used.stderr.splitlines() if line.startswith("error:")]
    assert "family 'word2vec' is provided by two distributions: ptmkit 0.1.0 (plugin 'word2vec') and ptmkit-otherw2v 1.0 (plugin 'otherw2v')" in line
    strict = run_cli("plugins", path=[site], env={"PTMKIT_STRICT_PLUGINS": "1"})
    assert strict.returncode == 2 and "provided by two distributions" in strict.stderr


def test_unknown_family_lists_installed_ones() -> None:
    from ptmkit.errors import PluginError

    with pytest.raises(PluginError, match=r"unknown model family 'gpt9'; installed: albert, bert"):
        Registry.load().family("gpt9")


def test_every_hook_is_documented_and_tested() -> None:
    """datasette's meta-tests: the contract cannot drift from its docs and tests."""
    from ptmkit import hookspecs

    hooks = [name for name in dir(hookspecs) if name.startswith("ptmkit_")]
    assert hooks == sorted(
        ["ptmkit_model_families", "ptmkit_objectives", "ptmkit_heads", "ptmkit_corpus_readers", "ptmkit_register_commands"]
    )
    for name in hooks:
        doc = getattr(hookspecs, name).__doc__ or ""
        assert len(doc.split()) >= 10, f"hook {name} needs a docstring"
        # Each hook is implemented by the out-of-tree test plugin, whose effects the tests above check.
        assert f"def {name}(" in FOO_PLUGIN, f"hook {name} has no test"
