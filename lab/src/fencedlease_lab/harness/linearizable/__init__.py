"""A model check of the data: is the fenced resource, key by key, a linearizable fenced register?

Each key of the resource is a register whose state is ``(value, fence)``: the value last written
and the highest token accepted (with the lease that presented it). Every access is checked
against one sequential model, the library's fencing rule (`fencedlease._core.fencing.decide`,
restated in [`step`][fencedlease_lab.harness.linearizable.step]):

- ``write(v, t)``: accepted (the register becomes ``(v, t)``) or refused with the last accepted
  token ``last``; a refusal changes nothing;
- ``read(t)``: accepted (it returns the value and moves the fence to ``t``: reads are
  token-checked) or refused;
- an unfenced access (a plain read or write, as in the ``write-fenced`` and ``unfenced`` modes)
  is always accepted and leaves the fence alone.

The check asks whether one total order of the operations exists that respects real time (an
operation that completed before another was invoked comes first), in which each operation's
recorded outcome (the value a read returned, a write's acceptance or refusal and the ``last``
token it was refused with) is what the model gives. Operations of unknown outcome (``info``, or
never completed) may or may not have taken effect, at any time after their invocation: the search
may place them anywhere after their invocation or leave them out, which is exact.

The algorithm is Wing & Gong's ("Testing and verifying concurrent objects", 1993) with Lowe's
memoisation of (set of linearised operations, model state) ("Testing for linearizability",
2017), as Porcupine and Knossos do it, and P-compositionality (Horn & Kroening, 2015): a history
is linearizable iff each key's sub-history is, so every key is checked alone. When a key fails,
the smallest prefix of its history (cut at a completion) that cannot be linearized is found by
bisection (a prefix of a linearizable history is linearizable) and reported with the operation
whose completion breaks it, the operations concurrent with it and the longest partial
linearization the search found.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from .histories import ops_from_history, random_history
from .model import RegisterOp, RegisterState, step
from .search import KeyFailure, RegisterCheck, check_register

__all__ = [
    "KeyFailure",
    "RegisterCheck",
    "RegisterOp",
    "RegisterState",
    "check_register",
    "ops_from_history",
    "random_history",
    "step",
]
