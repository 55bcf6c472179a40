-- Take a slot of a semaphore and its fencing token in one atomic step.
-- KEYS[1]  slot set       <prefix>:{<name>}:semaphore         sorted set: owner token -> deadline ms (TIME)
-- KEYS[2]  slot tokens    <prefix>:{<name>}:semaphore:tokens  hash: owner token -> fencing token
-- KEYS[3]  counter        <prefix>:{<name>}:semaphore:fence   an integer, no TTL, never deleted
-- ARGV[1]  owner token
-- ARGV[2]  TTL in milliseconds, 1..2147483647
-- ARGV[3]  the caller's limit, 1..2147483647 (the client bounds it further)
-- returns  {1, "fencing_token", ttl_ms}  granted now: expired slots purged, fewer than ARGV[3]
--                                        live slots, the counter INCRed once
--          {2, "fencing_token", ttl_ms}  already ours (a retried acquire): deadline reset, no INCR
--          {0, 0, ms}                    every slot taken: ms until the first one expires
--          an error reply "ERR fencedlease semaphore acquire: ...", nothing written, for a bad
--          argument, a key of another type, or a counter that is not an integer in 0..2^63-2.
-- Every read and check precedes the first write (the purge of expired slots included).
-- Runs after lease_common.lua and semaphore_common.lua.
redis.replicate_commands()  -- TIME before the writes; required by Redis 6.2, a no-op from 7.0
local owner = ARGV[1]
local ttl, limit = ttl_arg(ARGV[2]), ttl_arg(ARGV[3])
local function refuse(why)
  return redis.error_reply('ERR fencedlease semaphore acquire: ' .. why)
end
if not ttl then
  return refuse('ttl_ms must be a positive integer (at most 2147483647), got ' .. tostring(ARGV[2]))
end
if not limit then
  return refuse('limit must be a positive integer (at most 2147483647), got ' .. tostring(ARGV[3]))
end
local why = foreign_slots(KEYS[1], KEYS[2])
if why then
  return refuse(why)
end
local token
token, why = next_token(KEYS[3])
if not token then
  return refuse('the fencing counter ' .. KEYS[3] .. ' ' .. why)
end
local now = now_ms()
-- Writes from here on. A token hash without its slot set holds only orphans (an earlier version
-- expired the two keys apart): it goes. Then purge the slots whose deadline has come (held while
-- now < deadline).
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('DEL', KEYS[2])
end
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
if #expired > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  for i = 1, #expired, 1000 do  -- unpack() in chunks: Lua's stack takes a few thousand values
    redis.call('HDEL', KEYS[2], unpack(expired, i, math.min(i + 999, #expired)))
  end
end
local deadline = string.format('%d', now + ttl)
if redis.call('ZSCORE', KEYS[1], owner) then
  local ours = redis.call('HGET', KEYS[2], owner)
  if ours and is_token(ours) then
    redis.call('ZADD', KEYS[1], 'XX', deadline, owner)
    expire_with_slots(KEYS[1], KEYS[2], now)
    return {2, ours, ttl}
  end
  redis.call('ZREM', KEYS[1], owner)  -- a slot without a valid token is dropped, granted anew
  redis.call('HDEL', KEYS[2], owner)
end
if redis.call('ZCARD', KEYS[1]) >= limit then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  expire_with_slots(KEYS[1], KEYS[2], now)
  return {0, 0, tonumber(first[2]) - now}
end
redis.call('INCR', KEYS[3])
redis.call('ZADD', KEYS[1], deadline, owner)
redis.call('HSET', KEYS[2], owner, token)
expire_with_slots(KEYS[1], KEYS[2], now)
return {1, token, ttl}
