"""``ptmkit compress``: a smaller pre-trained run cut from a larger one.

``--keep-layers 0,2,4`` keeps those blocks of the backbone, with their trained weights (the
family implements :class:`~ptmkit.contract.KeepsLayers`): DistilBERT's student initialisation
"from the teacher by taking one layer out of two" (Sanh et al. 2019, section 3). The result is an
ordinary pre-trained run: ``ptmkit finetune OUT ... --teacher FINE_TUNED_TEACHER`` then distils
into it (:mod:`ptmkit.training.distillation`), ``export`` and ``serve`` read it.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from rich.console import Console

from ptmkit.config import read_toml
from ptmkit.contract import KeepsLayers
from ptmkit.errors import ConfigError, RunDirError
from ptmkit.plugins import Registry, get_registry
from ptmkit.rundir import CONFIG, POOLING, TOKENIZER, RunDir, staged_run, write_backbone_run


def parse_layers(text: str) -> list[int]:
    """``"0,2,4"`` -> ``[0, 2, 4]``.

    Raises:
        ConfigError: an item that is not an integer.
    """
    try:
        return [int(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise ConfigError(f"--keep-layers {text!r}: give comma-separated block indices, e.g. 0,2,4") from None


def keep_layers_run(run_dir: str | Path, out: str | Path, layers: list[int], console: Console, registry: Registry | None = None) -> dict[str, Any]:
    """Write to ``out`` the pre-trained run of blocks ``layers`` of ``run_dir``'s backbone.

    Returns:
        the new run's manifest, with ``parameters`` before and after.

    Raises:
        RunDirError: ``run_dir`` is not a pre-trained run, or ``out`` is not empty.
        ConfigError: the family cannot keep layers, or ``layers`` is out of range or order.
    """
    from ptmkit.training.finetune import load_backbone
    from ptmkit.training.setup import quiet_tensorflow

    registry = registry or get_registry()
    source, target = RunDir(run_dir), Path(out)
    manifest = source.manifest()
    if manifest["stage"] != "pretrain":
        raise RunDirError(f"{source.path}: is a {manifest['stage']} run; compress a pre-trained (or imported) run")
    family = registry.family(manifest["family"])
    if not isinstance(family, KeepsLayers):
        raise ConfigError(f"--keep-layers: the {family.name} family cannot drop blocks of its backbone (it does not implement KeepsLayers)")
    if target.exists() and (not target.is_dir() or any(target.iterdir())):  # before loading the backbone
        raise RunDirError(f"{target}: exists and is not an empty directory; choose another --out")
    quiet_tensorflow()
    backbone, config, _, _ = load_backbone(registry, source)
    model_config, smaller = family.keep_layers(config.model, backbone, layers)
    stored = read_toml(source.require(CONFIG))
    stored["model"] = _asdict(model_config)
    parameters = {"before": int(backbone.count_params()), "after": int(smaller.count_params())}
    console.print(f"kept blocks {','.join(map(str, layers))}: {parameters['before']:,} -> {parameters['after']:,} parameters")
    with staged_run(target, "compress") as run:
        if (source / POOLING).exists():
            shutil.copyfile(source / POOLING, run / POOLING)
        fields = {key: manifest[key] for key in ("inputs", "pooling") if key in manifest}
        written = write_backbone_run(
            run, registry, family.name, stored, None, smaller, source.require(TOKENIZER), **fields, parameters=parameters,
            compressed_from={"path": str(source.path.resolve()), "method": "keep-layers", "layers": layers},
        )
    return written


def _asdict(config: Any) -> dict[str, Any]:
    import dataclasses

    return dataclasses.asdict(config)
