"""ptmkit's lean runtime: load an exported model directory and run it with ONNX Runtime.

Imports neither TensorFlow nor Keras: a production app installs ``ptmkit-export`` alone.
"""

from ptmkit_export.predictor import Prediction, Predictor

__all__ = ["Prediction", "Predictor"]
