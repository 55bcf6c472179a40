# GENERATED from src/fencedlease/_async/__init__.py by `python scripts/unasync.py`:
# do not edit. Edit that source, then run it again (CI runs it with --check, failing while
# stale).
"""The library's I/O, written once: every module here that waits on a store or a server is the
asyncio face's, and `fencedlease._sync` holds its sync namesake, generated from it by
``scripts/unasync.py`` (``primitives``, how each face waits, is written by hand on both sides).
"""
