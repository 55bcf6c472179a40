-- What the semaphore scripts share: sent (after lease_common.lua), as the definitions each uses, with
-- semaphore_acquire.lua, semaphore_renew_many.lua, semaphore_release.lua and semaphore_count.lua.
-- A semaphore name's slots are a sorted set (owner token -> expiry deadline, Redis TIME in ms)
-- and a hash (owner token -> fencing token) sharing the name's hash tag; both carry a TTL up to
-- the latest deadline, so nothing outlives its slots.

-- The server's clock in whole milliseconds (TIME; a script that writes after it needs
-- redis.replicate_commands() first on Redis 6.2).
local function now_ms()
  local clock = redis.call('TIME')
  return tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
end
-- A TTL argument in 1..2^31-1 given as decimal digits (what PEXPIRE takes), or nil.
local function ttl_arg(s)
  local ttl = s and string.find(s, '^[1-9]%d*$') and #s <= 10 and tonumber(s)
  if not ttl or ttl > 2147483647 then
    return nil
  end
  return ttl
end
-- Both keys of a name expire with the latest deadline of its slots (none left: deleted), at one
-- absolute moment (PEXPIREAT): two relative PEXPIREs can land on different milliseconds (Redis 6.2
-- dates each from its own clock reading), and a slot set gone a millisecond before its token hash
-- leaves the hash's fields orphaned under the next grant.
local function expire_with_slots(slots, tokens, now)
  local last = redis.call('ZRANGE', slots, -1, -1, 'WITHSCORES')
  if #last == 0 then
    redis.call('DEL', slots, tokens)
    return
  end
  local at = string.format('%d', math.max(now + 1, tonumber(last[2])))
  redis.call('PEXPIREAT', slots, at)
  redis.call('PEXPIREAT', tokens, at)
end
-- Why the slot keys cannot be used (a key of another type), or nil.
local function foreign_slots(slots, tokens)
  local kind = foreign_type(slots, 'zset')
  if kind then
    return 'the slot set ' .. slots .. ' holds a ' .. kind .. ', not a zset'
  end
  kind = foreign_type(tokens, 'hash')
  if kind then
    return 'the slot tokens ' .. tokens .. ' hold a ' .. kind .. ', not a hash'
  end
  return nil
end
