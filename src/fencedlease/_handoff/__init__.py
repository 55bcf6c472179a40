"""Waking waiters when a lease is released: the hand-off queue and one pub/sub listener per manager.

An acquire with ``wait_ms > 0`` that finds the key held calls a *release waiter* between attempts
instead of sleeping blindly. A backend that can wake waiters provides one (``release_waiter()``);
for Redis that is `Handoff` (a thread) and
`AsyncHandoff` (a task), both built on the channel model of `fencedlease._handoff.channels`
(`Channels`) and the scripts and keys of `fencedlease._redis`:

1. It makes sure the manager's one listener connection (on a pool of its own, never one of the
   caller's pool's connections) is subscribed to the key's channel of this listener,
   ``<prefix>:{<key>}:handoff:<listener id>`` (started lazily on the first wait; a channel nobody
   waits on is unsubscribed after ``linger_s`` seconds, so a steady stream of waiters costs no
   SUBSCRIBE).
2. It queues the waiter in Redis (``enqueue.lua``: one EVALSHA), oldest first, with the listener's
   id. If the key turned out to be free meanwhile, or already handed to this waiter, it returns at
   once: acquire now. Where waiters take grants from their messages (below) and the channel is
   subscribed, the refused acquire before the wait has queued the waiter already, in the same
   script (``queue_args``: the waiter is registered before that acquire is sent), and no
   queueing command is sent.
3. It sleeps until woken or until the retry delay the manager chose has passed.

``release.lua`` hands the lease to the oldest live waiter as a new grant (new fencing token) and
publishes the grant, ``"<sha1>:<fencing token>:<px>"`` (the SHA-1 of that waiter's owner token,
the token it was granted and the PX the key was set with; the owner token never travels), on the
channel of that waiter's listener: only the process that waits for this grant hears it (with one
shared channel per key, every process with a waiter would wake for each grant and all but one
would discard it), and its listener wakes exactly that waiter. Because the lease goes to the
queue's head rather than back to the free pool, the holder that released cannot take it again
before the waiters: every contender is served in arrival order (Go's ``sync.Mutex`` hands off
directly to the oldest waiter in its starvation mode for the same reason; Redisson's
``RedissonFairLock`` keeps a queue of waiters in Redis).

The woken waiter takes the lease in one of two ways:

- *From the message* (a waiter queued ``direct``: the plain Redis backend with ``replica_acks=0``
  and no Sentinel check): no round trip. ``release.lua`` set the key with PX ``ttl_ms`` (the
  waiter's whole TTL) and appended the primary's replication id, which the backend's
  `PrimaryWatch` notes as it notes an acquire's. The
  deadline argument: the key expires at ``R + px``, ``R`` being when Redis ran the release (on
  Redis's clock). The release found the waiter's queue entry, so the command that created that
  entry ran before ``R``, and was sent earlier still; the waiter keeps the monotonic time of the
  first send that may have queued it in this acquire call (``AcquireAttempt.queued_mono``; a later
  poll's send may come after ``R`` and is never used), so ``deadline = queued_mono + px`` is never
  later than Redis's expiry (clock rates assumed equal, as for every lease deadline). The grant is
  taken only if that deadline leaves at least two heartbeats; the renewer then renews it at its
  usual cadence.
- *By a claim* (any other waiter, and a direct one whose deadline is too short, say after a long
  wait): its next acquire finds the key already its own ("already ours": one round trip, no new
  token, the TTL reset; with ``replica_acks`` its ``WAIT`` covers the grant). The key's PX is then
  cut to the waiter's deadline plus ``grace_ms``, so a grant to a waiter that died meanwhile
  blocks the key briefly; a direct waiter that died holds it for its ``ttl_ms``, as a holder that
  dies does.

Polling stays the fallback, so nothing depends on a notification arriving: a lost message (the
listener's connection was killed, a lease expired instead of being released) costs a waiter at most
the retry delay it was sleeping anyway, after which its acquire finds the key free or handed to it
(and claims it). A message that reaches a waiter no longer waiting is dropped.
A waiter's last attempt leaves the queue in the same script when refused (``acquire.lua``'s
``'leave'``, where waiters take grants from their messages), so a release after it hands the key
to the next waiter, never to one that has gone. A waiter that stops waiting otherwise (cancelled,
interrupted, failed, closed; a last attempt that carried no ``'leave'``) releases with its owner
token on the way out (the manager does it): ``release.lua`` takes it out of the queue and passes
on a lease handed to it meanwhile. A queueing command the wait stopped waiting for (no reply
within the wait, or the wait was cancelled or interrupted) may land after the call has ended,
after that clean-up too, and queue a waiter that has gone: `LateQueueing` keeps such commands,
and when one ends after its call did, the manager releases with the owner token once more if the
command queued the caller (or may have, and the call holds no lease under that token), so the
entry, and a lease handed to it meanwhile, is passed on one round trip after it landed.
A waiter that crashed drops out at its deadline (its wait plus ``grace_ms``, on Redis's clock;
none for its last wait); a hand-off to it in that window leaves
the key unclaimed for at most ``2 * grace_ms`` before it expires.

Other backends get the faces' `SleepWaiter` (`AsyncSleepWaiter`),
which just sleeps: `release_waiter_for`.

This package holds what both faces share, with no I/O: the waiter protocols
(`fencedlease._handoff.waiters`; the waiters are in each face's ``handoff`` module), the queueing
commands a wait gave up on (`fencedlease._handoff.late`), the Redis hand-offs' common state, the
waiter's name and how a listener logs its failures and its death (`fencedlease._handoff.base`),
and the channel model (`fencedlease._handoff.channels`).
"""
