-- How many live slots a semaphore has (deadline after now). Reads only.
-- KEYS[1]  slot set  <prefix>:{<name>}:semaphore
-- returns  the number of slots whose deadline (Redis TIME, ms) has not come; an error reply
--          "ERR fencedlease semaphore count: ..." for a key of another type.
-- Runs after lease_common.lua and semaphore_common.lua.
local kind = foreign_type(KEYS[1], 'zset')
if kind then
  return redis.error_reply('ERR fencedlease semaphore count: the slot set ' .. KEYS[1] .. ' holds a '
                           .. kind .. ', not a zset')
end
return redis.call('ZCOUNT', KEYS[1], '(' .. now_ms(), '+inf')
