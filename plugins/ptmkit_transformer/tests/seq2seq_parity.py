"""Checks shared by the import tests of Hugging Face encoder-decoders (Marian, BART)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def assert_decoder_logits_match(backbone: Any, directory: Path, shapes: list[tuple[int, int, int]], inputs: list[list[Any]]) -> None:
    """The imported ``backbone``'s decoder logits equal transformers' (``directory/logits-BxSxT.npy``)
    within 1e-4 at each shape, through the translation path (encoder, then decoder) and through the
    training path (the whole backbone, then :func:`ptmkit_transformer.backbone.output_logits`);
    padded decoder positions, which predict nothing, are not compared."""
    from ptmkit_transformer.backbone import output_logits

    for (batch, source, target), arrays in zip(shapes, inputs, strict=True):
        ids, mask, dec, dec_mask = (np.asarray(a, "int32") for a in arrays)
        states = np.asarray(backbone.encoder([ids, mask]))
        ours = np.asarray(backbone.decoder([dec, dec_mask, states, mask]))
        theirs = np.load(directory / f"logits-{batch}x{source}x{target}.npy")
        real = dec_mask.astype(bool)
        assert np.max(np.abs(ours - theirs)[real]) < 1e-4, (batch, source, target, np.max(np.abs(ours - theirs)[real]))
        named = backbone({"encoder_token_ids": ids, "encoder_padding_mask": mask, "decoder_token_ids": dec, "decoder_padding_mask": dec_mask})
        assert np.max(np.abs(np.asarray(output_logits(backbone, named["decoder_sequence_output"])) - theirs)[real]) < 1e-4
