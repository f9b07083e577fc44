"""The tiny CoVe the cove plugin's tests train (shared by its conftest and tests)."""

#: Words kept from the shipped pairs, and the tiny GloVe's dimension.
PAIRS, GLOVE_DIM = 300, 8

#: A CoVe small enough to train in seconds on :data:`PAIRS` pairs: every code path is the real one.
TINY_COVE = [
    f"model.glove_dim={GLOVE_DIM}",
    "model.vocabulary_size=2000",
    "model.hidden_dim=8",
    "model.decoder_dim=16",
    "model.target_vocabulary_size=400",
    "model.target_min_frequency=1",
    "model.max_length=12",
    "model.batch_size=16",
    "model.max_steps=16",
    "model.learning_rate=1e-2",
    "model.dropout=0.0",
]
