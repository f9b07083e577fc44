"""Training glue: schedules, callbacks, checkpoint and resume, precision, and the
pre-training and fine-tuning drivers behind ``ptmkit train`` and ``ptmkit finetune``."""
