"""One contract, every backend: the same cases and the same model over memory, SQLite and Redis.

``harness`` holds the stores and the model shared with ``tests/unit/test_backend_model.py`` and
``tests/live/test_backend_model_redis.py`` (importable as ``contract.harness`` because
``tests/conftest.py`` puts ``tests/`` on ``sys.path``).
"""
