"""The Redis adapter: everything the library says to Redis, written once.

The lease backends ([`RedisBackend`][fencedlease.RedisBackend],
[`AsyncRedisBackend`][fencedlease.aio.AsyncRedisBackend]), the hand-off queue
(`fencedlease._sync.handoff`, `fencedlease._async.handoff`) and
[`RedisFencedResource`][fencedlease.RedisFencedResource] are built on these modules:

- [`.keys`][]: the key layout (every key and channel of a name), script KEYS/ARGV;
- [`.scripts`][]: the Lua scripts, and running one (one NOSCRIPT policy), sync;
- [`.replies`][]: decoding script replies (``str`` or ``bytes`` alike), text decoding;
- [`.errors`][]: redis-py errors to [`BackendError`][fencedlease.BackendError], classified (sent or
  not, may have written or not), ACL refusals named;
- [`.acl_refusals`][]: a Redis ACL refusal's text in words (the command, the script line);
- [`.options`][]: the options of a client made from a URL, checked before it connects;
- [`.clients`][]: the caller's client from a URL (either face), options checked; a connection of
  one's own beside the caller's pool (sync);
- [`.aio`][]: the asyncio twins of [`.scripts`][]' runner and [`.clients`][];
- [`.cluster`][]: what the Redis Cluster backends of both faces share (renewals by slot and node,
  the ``redis+cluster://`` URL).

A Redis Cluster or Sentinel backend is an addition on top of these, not a copy: the keys share one
hash slot per name, and the runner and the error mapping take any redis-py client.
"""
