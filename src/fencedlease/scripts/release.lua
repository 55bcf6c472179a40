-- Release a lease: if, and only if, the owner token still owns it, hand it to the oldest live
-- waiter (fencedlease._handoff), or else delete it.
-- KEYS[1]  lease key       <prefix>:{<key>}               value "<fencing_token>:<owner_token>"
-- KEYS[2]  fencing counter <prefix>:{<key>}:fence         INCRed only when handing the lease over
-- KEYS[3]  waiter queue    <prefix>:{<key>}:waiters       sorted set: owner token -> arrival us
-- KEYS[4]  waiter details  <prefix>:{<key>}:waiters:meta  hash: owner -> "<deadline_ms>:<ttl_ms>:<grace_ms>"
-- ARGV[1]  owner token
-- returns  1 when released: the key was deleted, or granted to the oldest live waiter;
--          0 when the key is missing or owned by someone else (nothing touched).
-- Hand-off (when nobody waits the release is ZCARD, GET, DEL). Waiters are queued
-- by enqueue.lua; all four keys share the hash tag, so they live in one Redis Cluster slot. The oldest
-- waiter whose deadline (Redis TIME) has not passed, and who is not the releasing owner, is granted
-- the lease as a new grant: the fencing counter KEYS[2] is INCRed, the key is set
-- to "<token>:<waiter's owner token>" with PX min(ttl_ms, deadline - now + grace_ms) until the
-- waiter claims it (acquire.lua's "already ours" path resets the TTL), and the waiter is woken by
-- PUBLISH on "<lease key>:handoff" with the SHA-1 of its owner token (never the token itself).
-- So a releasing holder cannot barge ahead of the queue: waiters are served first come, first
-- served (the direct hand-off of Go's sync.Mutex in starvation mode; Redisson's fair lock queue).
-- A lost notification costs the waiter one retry delay: its next poll finds the key already its own.
-- The releasing owner leaves the waiter queue first, whatever else happens: a waiter that gives up
-- (or is cancelled) releases with its owner token, which both drops its queue entry and passes on
-- a lease that was handed to it meanwhile.
redis.replicate_commands()  -- TIME below after a write; required by Redis 6.2, a no-op from 7.0
local waiting = redis.call('ZCARD', KEYS[3])
if waiting > 0 and redis.call('ZREM', KEYS[3], ARGV[1]) == 1 then
  redis.call('HDEL', KEYS[4], ARGV[1])
  waiting = waiting - 1
end
local current = redis.call('GET', KEYS[1])
if not current then
  return 0
end
local sep = string.find(current, ':', 1, true)
if not (sep and string.sub(current, sep + 1) == ARGV[1]) then
  return 0
end
local queue = KEYS[3]
if waiting > 0 then
  local meta = KEYS[4]
  local clock = redis.call('TIME')
  local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
  while true do
    local head = redis.call('ZPOPMIN', queue)
    if #head == 0 then
      break
    end
    local owner = head[1]
    local info = redis.call('HGET', meta, owner)
    redis.call('HDEL', meta, owner)
    if info and owner ~= ARGV[1] then
      local a = string.find(info, ':', 1, true)
      local b = string.find(info, ':', a + 1, true)
      local deadline = tonumber(string.sub(info, 1, a - 1))
      if deadline > now_ms then
        local px = math.min(tonumber(string.sub(info, a + 1, b - 1)),
                            deadline - now_ms + tonumber(string.sub(info, b + 1)))
        local token = redis.call('INCR', KEYS[2])
        redis.call('SET', KEYS[1], string.format('%d', token) .. ':' .. owner,
                   'PX', string.format('%d', px))
        redis.call('PUBLISH', KEYS[1] .. ':handoff', redis.sha1hex(owner))
        return 1
      end
    end
  end
end
redis.call('DEL', KEYS[1])
return 1
