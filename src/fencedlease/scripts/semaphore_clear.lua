-- Delete every slot of a semaphore, whoever holds it (the operator's escape hatch); the counter is
-- kept, so later grants still get larger tokens.
-- KEYS[1]  slot set     <prefix>:{<name>}:semaphore
-- KEYS[2]  slot tokens  <prefix>:{<name>}:semaphore:tokens
-- returns  the number of live slots deleted (deadline not passed); an error reply
--          "ERR fencedlease semaphore clear: ..." with nothing written for a key of another type.
-- Runs after lease_common.lua and semaphore_common.lua.
local why = foreign_slots(KEYS[1], KEYS[2])
if why then
  return redis.error_reply('ERR fencedlease semaphore clear: ' .. why)
end
local live = redis.call('ZCOUNT', KEYS[1], '(' .. now_ms(), '+inf')
redis.call('DEL', KEYS[1], KEYS[2])
return live
