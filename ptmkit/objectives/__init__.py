"""Pre-training objectives shared by model families (registered by :mod:`ptmkit.builtins`)."""
