"""The queueing commands a wait stopped waiting for (`LateQueueing`), and the release each asks
for once it has landed after its acquire call ended. How the hand-off works is in
`fencedlease._handoff`. No I/O.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["LateQueueing"]


class LateQueueing:
    """Queueing commands a wait stopped waiting for while they were out (their reply did not come
    within the wait; the wait was cancelled or interrupted), and what each asks for when it ends.

    Such a command may land after its acquire call ended, even after the call's clean-up release
    (the manager sends one when a waiter gives up), and queue an owner token nobody waits with:
    a later release would hand the key to that entry, and a waiter taking grants from their
    messages would be given its whole ``ttl_ms`` while its manager's listener still hears the
    channel. Once both the call and the command have ended, the command's outcome decides:

    - the call ended holding a lease under that token: nothing, whatever the command did. A
      command that queued the caller ran while another owner held the key, so before the call's
      grant, and that grant (handed to the entry, or a later attempt) took the entry out; a
      release now would end the live lease (a hand-off grant is made under the same token);
    - otherwise, it queued the caller (``queued`` True) or failed or was cancelled once sent
      (None: it may have): release with the owner token, which takes the entry out and passes
      on a lease handed to it meanwhile;
    - it did not queue (False): nothing.

    A command that ends while its call still runs needs nothing: whatever the call does next (its
    grant takes it out of the queue, its give-up releases) reaches Redis after it.

    Handles are whatever the face waits on (a ``concurrent.futures.Future``, an
    ``asyncio.Task``). Called under the owner's lock (the sync face) or on its loop. No I/O.
    """

    def __init__(self) -> None:
        self._out: dict[object, tuple[str, str]] = {}  # handle -> (key, owner token)
        self._count: dict[tuple[str, str], int] = {}  # (key, owner token) -> commands out
        self._ended: dict[tuple[str, str], tuple[bool, Callable[[], None]]] = {}

    def __len__(self) -> int:
        """How many commands are out (for tests)."""
        return len(self._out)

    def gave_up_on(self, handle: object, key: str, owner_token: str) -> None:
        """The wait of ``owner_token`` for ``key`` stopped waiting for the command ``handle``."""
        who = (key, owner_token)
        self._out[handle] = who
        self._count[who] = self._count.get(who, 0) + 1

    def ended(self, key: str, owner_token: str, holds: bool, release: Callable[[], None]) -> None:
        """The acquire call of ``owner_token`` ended (``holds``: with a lease under it);
        ``release`` sends a release with that token in the background."""
        who = (key, owner_token)
        if who in self._count:
            self._ended[who] = (holds, release)

    def landed(self, handle: object, queued: bool | None) -> Callable[[], None] | None:
        """The command ``handle`` ended: ``queued`` True (it queued the caller), False (it did
        not, or it never ran), None (it failed or was cancelled once sent: it may have). Returns
        the release to call now (outside the owner's lock), or None."""
        who = self._out.pop(handle, None)
        if who is None:
            return None
        left = self._count[who] - 1
        if left:
            self._count[who] = left
            ended = self._ended.get(who)
        else:
            del self._count[who]
            ended = self._ended.pop(who, None)
        if ended is None:
            return None
        holds, release = ended
        if not holds and queued is not False:
            return release
        return None
