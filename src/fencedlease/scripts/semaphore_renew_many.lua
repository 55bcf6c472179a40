-- Renew a batch of semaphore slots in one command: for each, move its deadline to now + TTL if,
-- and only if, the owner token still has a live slot (its deadline not passed).
-- KEYS[2i-1]  slot set of item i     <prefix>:{<name>}:semaphore
-- KEYS[2i]    slot tokens of item i  <prefix>:{<name>}:semaphore:tokens
-- ARGV[2i-1]  owner token of item i
-- ARGV[2i]    new TTL of item i in milliseconds, 1..2147483647
-- returns     one entry per item: its fencing token (decimal string) when renewed; 0 when the
--             slot is gone or expired (lost); -1 for a bad TTL; -2 for a key of another type;
--             -3 for a slot whose token is malformed (-1..-3: nothing touched for that item).
-- Never recreates a slot. Runs after lease_common.lua and semaphore_common.lua.
redis.replicate_commands()
local now = now_ms()
local replies = {}
for i = 1, #KEYS / 2 do
  local slots, tokens, owner = KEYS[2 * i - 1], KEYS[2 * i], ARGV[2 * i - 1]
  local ttl = ttl_arg(ARGV[2 * i])
  if not ttl then
    replies[i] = -1
  elseif foreign_slots(slots, tokens) then
    replies[i] = -2
  else
    local deadline = redis.call('ZSCORE', slots, owner)
    if not deadline or tonumber(deadline) <= now then
      replies[i] = 0
    else
      local token = redis.call('HGET', tokens, owner)
      if not token or not is_token(token) then
        replies[i] = -3
      else
        redis.call('ZADD', slots, 'XX', string.format('%d', now + ttl), owner)
        expire_with_slots(slots, tokens, now)
        replies[i] = token
      end
    end
  end
end
return replies
