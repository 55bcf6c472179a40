"""The semaphore store's model: what every slot store (memory, SQLite, Redis) must answer, step by
step, with time in whole milliseconds."""

from __future__ import annotations

from fencedlease._core.protocol import AcquireReply


class SlotModel:
    """Slots of many names: name -> owner -> (token, expiry ms); one counter per name."""

    def __init__(self) -> None:
        self.slots: dict[str, dict[str, tuple[int, int]]] = {}
        self.counters: dict[str, int] = {}

    def _live(self, name: str, now: int) -> dict[str, tuple[int, int]]:
        slots = self.slots.setdefault(name, {})
        for owner in [o for o, (_, expires) in slots.items() if now >= expires]:
            del slots[owner]
        return slots

    def acquire(self, now: int, name: str, owner: str, ttl_ms: int, limit: int) -> AcquireReply:
        slots = self._live(name, now)
        if owner in slots:
            token = slots[owner][0]
            slots[owner] = (token, now + ttl_ms)
            return AcquireReply(True, token, ttl_ms, retried=True)
        if len(slots) >= limit:
            return AcquireReply(False, 0, min(e for _, e in slots.values()) - now)
        token = self.counters[name] = self.counters.get(name, 0) + 1
        slots[owner] = (token, now + ttl_ms)
        return AcquireReply(True, token, ttl_ms)

    def renew(self, now: int, name: str, owner: str, ttl_ms: int) -> int:
        slots = self._live(name, now)
        if owner not in slots:
            return 0
        token = slots[owner][0]
        slots[owner] = (token, now + ttl_ms)
        return token

    def release(self, now: int, name: str, owner: str) -> bool:
        return self._live(name, now).pop(owner, None) is not None

    def count(self, now: int, name: str) -> int:
        return len(self._live(name, now))

    def clear(self, now: int, name: str) -> bool:
        live = bool(self._live(name, now))
        self.slots.pop(name, None)
        return live
