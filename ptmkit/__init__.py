"""ptmkit: pre-train, adapt, compress and deploy pre-trained language models behind one plugin
contract, with Keras 3 for training and ONNX Runtime for serving."""

from __future__ import annotations

import pluggy

__version__ = "0.1.0"

#: Marker for plugin hook implementations: ``@ptmkit.hookimpl def ptmkit_model_families(): ...``
hookimpl = pluggy.HookimplMarker("ptmkit")

__all__ = ["__version__", "hookimpl"]
