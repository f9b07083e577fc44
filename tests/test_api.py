"""``ptmkit.api``, the one module plugins import: complete, documented, cheap to import."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

import ptmkit.api as api


def test_every_public_name_resolves_and_is_listed_in_the_module_docs() -> None:
    assert len(api.__all__) == len(set(api.__all__))
    undocumented = [name for name in api.__all__ if name != "__version__" and name not in (api.__doc__ or "")]
    assert not undocumented, f"ptmkit.api names missing from its docstring: {undocumented}"
    for name in api.__all__:
        assert getattr(api, name) is not None, name
    assert api.AdamW.__module__ == "ptmkit.training.schedule"  # the lazy one
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        api.nope  # noqa: B018


def test_importing_the_api_loads_neither_keras_nor_tensorflow() -> None:
    code = "import sys, ptmkit.api; print(sorted({'keras', 'tensorflow'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@dataclasses.dataclass
class _Config:
    size: int = 1
    limit: int = 0
    ratio: float = 0.5
    kind: str = "a"


@pytest.mark.parametrize(
    ("check", "field", "value", "message"),
    [
        (lambda c: api.check_positive(c, "model", "size"), "size", 0, "config key 'model.size' must be > 0, got 0"),
        (lambda c: api.check_non_negative(c, "model", "limit"), "limit", -1, "config key 'model.limit' must be >= 0, got -1"),
        (lambda c: api.check_unit_interval(c, "train", "ratio"), "ratio", 1.5, r"config key 'train.ratio' must be in \[0, 1\], got 1.5"),
        (lambda c: api.check_choice(c, "model", "kind", ("a", "b")), "kind", "c", "config key 'model.kind' must be one of a, b, got 'c'"),
    ],
)
def test_config_validators_name_the_key_and_value(check, field: str, value: object, message: str) -> None:  # type: ignore[no-untyped-def]
    check(_Config())  # the defaults pass (limit = 0 is allowed where only >= 0 is asked)
    with pytest.raises(api.ConfigError, match=f"^{message}$"):
        check(dataclasses.replace(_Config(), **{field: value}))
