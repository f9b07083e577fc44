"""Corpus and labelled-data readers, tokenization helpers and the pre-training batch pipeline."""
