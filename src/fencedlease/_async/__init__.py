"""The library's I/O, written once: ``_async`` holds the asyncio face's modules, written by hand,
and ``_sync`` their sync namesakes, generated from them by ``scripts/unasync.py``
(``primitives``, how each face waits, and the twins not yet written once are hand-written on
both sides).
"""
