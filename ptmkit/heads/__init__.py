"""Fine-tune heads shared by model families (registered by :mod:`ptmkit.builtins`)."""
