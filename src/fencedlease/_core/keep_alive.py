"""The checks ``keep_alive`` makes (either face) before a lease goes under the renewer. No I/O."""

from __future__ import annotations

from typing import Literal

from fencedlease._core.errors import ValidationError
from fencedlease._core.validate import check_callback, check_heartbeat_ms

__all__ = ["check_keep_alive"]


def check_keep_alive(
    lease: object,
    lease_type: type,
    backend: object,
    heartbeat_ms: object,
    on_renew_error: object,
    held: bool,
) -> int | Literal[False]:
    """``lease`` may go under the renewer of the manager over ``backend``: a ``lease_type``
    made by that manager (``acquire`` or ``restore``), not kept already (``held``: in a
    ``hold`` or another ``keep_alive``; or renewed in the background), not released nor being
    released. Returns the heartbeat (``heartbeat_ms`` as ``hold`` takes it, against the lease's
    ``ttl_ms``). A lease already lost is left to the caller (it raises ``LeaseLostError``).

    Raises:
        ValidationError: naming ``lease``, ``heartbeat_ms`` or ``on_renew_error``.
    """
    if not isinstance(lease, lease_type):
        raise ValidationError(
            "lease", f"lease must be a {lease_type.__name__}; got {type(lease).__name__}"
        )
    if getattr(lease, "_backend", None) is not backend:
        raise ValidationError("lease", "lease was made by another manager (another store)")
    if held or getattr(lease, "_entry", None) is not None:
        raise ValidationError("lease", "lease is renewed in the background already")
    state = lease._state  # type: ignore[attr-defined]
    if state.released or state.releasing:
        raise ValidationError("lease", f"lease {state.key!r} was released")
    heartbeat = check_heartbeat_ms(heartbeat_ms, state.ttl_ms)
    check_callback(on_renew_error, "on_renew_error")
    return heartbeat
