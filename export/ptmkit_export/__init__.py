"""ptmkit's lean runtime: load an exported model directory and run it with ONNX Runtime.

Imports neither TensorFlow nor Keras: a production app installs ``ptmkit-export`` alone.
"""

from ptmkit_export.errors import ExportDirError
from ptmkit_export.manifest import read_manifest
from ptmkit_export.predictor import Prediction, Predictor
from ptmkit_export.quantize import quantize_int8
from ptmkit_export.translation import Translator

__all__ = ["ExportDirError", "Prediction", "Predictor", "Translator", "quantize_int8", "read_manifest"]
