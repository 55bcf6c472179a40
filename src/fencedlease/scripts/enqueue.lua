-- Queue a waiter for the lease's next release (fencedlease._handoff; the hand-off is release.lua).
-- KEYS[1]  lease key       <prefix>:{<key>}                 value "<fencing_token>:<owner_token>"
-- KEYS[2]  waiter queue    <prefix>:{<key>}:waiters         sorted set: owner token -> arrival us
-- KEYS[3]  waiter details  <prefix>:{<key>}:waiters:meta    hash: owner ->
--                            "<deadline_ms>:<ttl_ms>:<grace_ms>[:<listener>[:direct]]"
-- ARGV[1]  the waiter's owner token (the one its acquire retries with)
-- ARGV[2]  how long this wait lasts, milliseconds (the waiter polls again then)
-- ARGV[3]  the ttl_ms the waiter asked for
-- ARGV[4]  grace_ms: how long past the wait the waiter is still taken as alive
-- ARGV[5]  optional: the waiter's listener id (1..32 lowercase hex digits): release.lua wakes it
--          on "<lease key>:handoff:<listener>", the channel only its own process subscribes to;
--          missing or empty: on "<lease key>:handoff"
-- ARGV[6]  optional: 'direct' when the waiter takes a hand-off from the message itself, with no
--          claim (release.lua then grants it its whole ttl_ms); needs a listener id
-- returns  1 queued (the arrival time of a waiter already queued is kept: first come, first
--            served across its polls); its deadline is now + ARGV[2] + ARGV[4] on Redis's clock;
--          0 the lease key is free, or already this owner's (handed to it): acquire now; the
--            waiter is taken out of the queue;
--          an error reply "ERR fencedlease enqueue: ...", with nothing written, when a key holds
--            another type (or cannot be read), the lease key a malformed value, or ARGV[2..4]
--            are not decimal integers in 0..2^31-1 (ttl_ms 1..2^31-1), or ARGV[5] is not a
--            listener id, or ARGV[6] is neither missing, '' nor 'direct' (with a listener id).
-- Every read and type check comes before the first write, and the writes cannot fail on the
-- keys' contents (only a command an ACL denies can: the manager then releases with the same
-- owner token, which takes the waiter out of the queue).
-- A waiter that stops polling (gave up, crashed) drops out at its deadline: release.lua skips it.
-- Both queue keys expire by themselves once nobody has polled for a while.
-- Runs after lease_common.lua (prepended by the client): lease_at, foreign_type, queue_error,
-- queue_waiter.
redis.replicate_commands()  -- TIME below; required by Redis 6.2, a no-op from 7.0
local owner = ARGV[1]
local function refuse(role, key, why)
  return redis.error_reply('ERR fencedlease enqueue: the ' .. role .. ' ' .. key .. ' ' .. why)
end
local problem = queue_error({ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]},
                            {'ARGV[2]', 'ARGV[3]', 'ARGV[4]', 'ARGV[5]', 'ARGV[6]'})
if problem then
  return redis.error_reply('ERR fencedlease enqueue: ' .. problem)
end
local current, _, holder, why = lease_at(KEYS[1])
if why then
  return refuse('lease key', KEYS[1], why)
end
local wait = current and holder ~= owner
local queued = redis.pcall('ZSCORE', KEYS[2], owner)
if type(queued) == 'table' then
  return refuse('waiter queue', KEYS[2], 'cannot be read: ' .. tostring(queued.err))
end
if wait or queued then  -- the details are written (HSET) or cleaned (HDEL)
  local kind = foreign_type(KEYS[3], 'hash')
  if kind then
    return refuse('waiter details', KEYS[3], 'hold a ' .. kind .. ', not a hash')
  end
end
-- Writes only from here on.
if not wait then
  if queued then
    redis.call('ZREM', KEYS[2], owner)
    redis.call('HDEL', KEYS[3], owner)
  end
  return 0
end
queue_waiter(KEYS[2], KEYS[3], owner, {ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]})
return 1
