"""The library's I/O, written once: every module here that waits on a store or a server is the
asyncio face's, and `fencedlease._sync` holds its sync namesake, generated from it by
``scripts/unasync.py`` (``primitives``, how each face waits, is written by hand on both sides).
"""
