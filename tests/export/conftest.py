"""The lean runtime's tests use the session fixtures ``tiny_export`` and ``tiny_embedding_export``
of the repository's root ``conftest.py`` (shared with ``tests/test_predict_cli.py``); the helpers
live in export_fixtures.py."""
