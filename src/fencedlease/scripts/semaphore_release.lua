-- Give back a semaphore slot: if, and only if, the owner token holds a live one.
-- KEYS[1]  slot set     <prefix>:{<name>}:semaphore
-- KEYS[2]  slot tokens  <prefix>:{<name>}:semaphore:tokens
-- ARGV[1]  owner token
-- returns  1 when a live slot was removed; 0 when there was none (gone, or its deadline passed:
--          an expired slot of the owner's is removed too); an error reply
--          "ERR fencedlease semaphore release: ..." with nothing written for a key of another type.
-- Runs after lease_common.lua and semaphore_common.lua.
redis.replicate_commands()
local why = foreign_slots(KEYS[1], KEYS[2])
if why then
  return redis.error_reply('ERR fencedlease semaphore release: ' .. why)
end
local now = now_ms()
local deadline = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not deadline then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
expire_with_slots(KEYS[1], KEYS[2], now)
if tonumber(deadline) <= now then
  return 0
end
return 1
