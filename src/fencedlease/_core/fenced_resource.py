"""The in-memory fenced resource, the reference for every other store, and what every fenced
resource of this library has: a name and a ``strict`` flag."""

from __future__ import annotations

import threading

from fencedlease._core.fencing import FenceState, decide, stale_token_error
from fencedlease._core.fencing_access import TokenOrLease, coerce_access
from fencedlease._core.validate import check_key, check_strict

__all__ = ["FencedResource", "NamedFence"]


class NamedFence:
    """What every fenced resource has: its ``name`` (a non-empty ``str``, used in errors) and
    ``strict``.

    Raises [`ValidationError`][fencedlease.ValidationError] for a bad ``name`` or a ``strict`` that
    is not a ``bool``.
    """

    def __init__(self, name: str, *, strict: bool = False) -> None:
        self._name = check_key(name, "name")
        self._strict = check_strict(strict)

    @property
    def name(self) -> str:
        """The resource's name, as given."""
        return self._name

    @property
    def strict(self) -> bool:
        """``True``: a token is accepted only if greater than every accepted one (not equal)."""
        return self._strict


class FencedResource(NamedFence):
    """An in-memory, thread-safe fenced resource: the reference for every other store.

    ``FencedResource(name, *, strict=False)``. [`accept`][fencedlease.FencedResource.accept] applies
    the fencing rule of `fencedlease._core.fencing` atomically (one lock); a process-local resource,
    so it protects only what lives in this process. ``name`` (a non-empty ``str``) is used in
    errors. The first lease accepted records its counter
    ([`lease_key`][fencedlease.FencedResource.lease_key], the lease's ``fencing_scope``); from then
    on leases of other counters (another key, or the same key under another prefix or store) are
    refused. Raises [`ValidationError`][fencedlease.ValidationError] for a bad ``name`` or a
    ``strict`` that is not a ``bool``.
    """

    def __init__(self, name: str, *, strict: bool = False) -> None:
        super().__init__(name, strict=strict)
        self._lock = threading.Lock()
        self._state: FenceState | None = None

    @property
    def last_token(self) -> int | None:
        """The largest accepted token, or ``None`` before the first access."""
        with self._lock:
            return None if self._state is None else self._state.token

    @property
    def last_fingerprint(self) -> str | None:
        """[`owner_fingerprint`][fencedlease.owner_fingerprint] of the lease that presented
        [`last_token`][fencedlease.FencedResource.last_token], or ``None``."""
        with self._lock:
            return None if self._state is None else self._state.fingerprint

    @property
    def lease_key(self) -> str | None:
        """The counter of the leases that fence this resource: the first accepted lease's
        ``fencing_scope`` (``"<prefix>:{<escaped key>}:fence"``; its ``key`` for a lease without
        one), or ``None`` while only bare ``int`` tokens (or nothing) were accepted."""
        with self._lock:
            return None if self._state is None else self._state.lease_key

    def accept(self, token_or_lease: TokenOrLease) -> int:
        """Admit one access by ``token_or_lease`` (an ``int`` token or a lease); return its token.

        Accepted only if the token is at least the largest accepted so far (``strict``: greater),
        not the same number as the last accepted one presented by a different lease (a duplicate
        grant), and, for a lease, if its counter is the one on record
        ([`lease_key`][fencedlease.FencedResource.lease_key]). Raises
        [`StaleTokenError`][fencedlease.StaleTokenError] (``.last_token`` is the largest accepted)
        when refused, its subclass [`LeaseKeyMismatchError`][fencedlease.LeaseKeyMismatchError] for
        a lease of another counter, [`ValidationError`][fencedlease.ValidationError] for something
        that is not a token (1..2**63 - 1) or a lease.
        """
        access = coerce_access(token_or_lease)
        with self._lock:
            state = self._state
            outcome = decide(state, access, strict=self._strict)
            if isinstance(outcome, FenceState):
                self._state = outcome
                return access.token
        assert state is not None  # a refusal needs something on record
        raise stale_token_error(
            self._name,
            access.token,
            state.token,
            outcome,
            lease_key=state.lease_key,
            presented_key=access.lease_key,
        )

    def __repr__(self) -> str:
        return (
            f"FencedResource({self._name!r}, strict={self._strict}, last_token={self.last_token!r})"
        )
