"""The Redis adapter: everything the library says to Redis, written once.

The lease backends (:class:`~fencedlease.RedisBackend`,
:class:`~fencedlease.aio.AsyncRedisBackend`), the hand-off queue
(:mod:`fencedlease._handoff_sync`, :mod:`fencedlease.aio._handoff`) and
:class:`~fencedlease.redis_fencing.RedisFencedResource` are built on these modules:

- :mod:`.keys`: the key layout (every key and channel of a name), script KEYS/ARGV;
- :mod:`.scripts`: the Lua scripts, and running one (one NOSCRIPT policy), sync;
- :mod:`.replies`: decoding script replies (``str`` or ``bytes`` alike), text decoding;
- :mod:`.errors`: redis-py errors to :class:`~fencedlease.BackendError`, classified (sent or not,
  may have written or not), ACL refusals named;
- :mod:`.options`: the options of a client made from a URL, checked before it connects;
- :mod:`.clients`: the caller's client from a URL (either face), options checked; a connection of
  one's own beside the caller's pool (sync);
- :mod:`.aio`: the asyncio twins of :mod:`.scripts`' runner and :mod:`.clients`.

A Redis Cluster or Sentinel backend is an addition on top of these, not a copy: the keys share one
hash slot per name, and the runner and the error mapping take any redis-py client.
"""
