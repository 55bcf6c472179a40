# GENERATED from src/fencedlease/_async/__init__.py by `python scripts/unasync.py`:
# do not edit. Edit that source, then run it again (CI runs it with --check, failing while
# stale).
"""The library's I/O, written once: ``_async`` holds the asyncio face's modules, written by hand,
and ``_sync`` their sync namesakes, generated from them by ``scripts/unasync.py``
(``primitives``, how each face waits, and the twins not yet written once are hand-written on
both sides).
"""
