-- Acquire a lease and its fencing token in one atomic step.
-- KEYS[1]  lease key            <prefix>:{<key>}         value "<fencing_token>:<owner_token>", has a TTL
-- KEYS[2]  fencing counter key  <prefix>:{<key>}:fence   an integer, no TTL, never deleted by the library
-- KEYS[3]  waiter queue         <prefix>:{<key>}:waiters       (fencedlease._handoff)
-- KEYS[4]  waiter details       <prefix>:{<key>}:waiters:meta
-- ARGV[1]  owner token (128 random bits, hex; any string without meaning to Redis)
-- ARGV[2]  TTL in milliseconds, an integer 1..2147483647 (validated by the client)
-- returns  {1, fencing_token, ttl_ms}  granted now: the counter was INCRed once
--          {2, fencing_token, ttl_ms}  already ours: a retried acquire after a lost reply, or a
--                                      waiter claiming the lease a release handed it (that
--                                      release issued the token): the stored token, TTL reset,
--                                      no INCR here
--          {0, 0, pttl_ms}             held by another owner; its remaining TTL in milliseconds
-- An owner that holds the lease is taken out of the waiter queue, so no later release hands the
-- key to a waiter that is no longer waiting.
--          an error reply, with nothing written, when ARGV[2] is not a positive integer
-- The TTL is checked and the counter INCRed before the SET, so that a bad TTL or a failing INCR
-- (a counter that is not an integer) aborts the script before anything was written: never a lease
-- without a token, and never a token spent on no lease.
local ttl = tonumber(ARGV[2])
if ttl == nil or ttl < 1 or ttl ~= math.floor(ttl) then
  return redis.error_reply('ERR fencedlease acquire: ttl_ms must be a positive integer, got ' .. ARGV[2])
end
local function leave_queue()  -- a no-op ZREM when nobody waits
  if redis.call('ZREM', KEYS[3], ARGV[1]) == 1 then
    redis.call('HDEL', KEYS[4], ARGV[1])
  end
end
local current = redis.call('GET', KEYS[1])
if not current then
  local token = redis.call('INCR', KEYS[2])
  redis.call('SET', KEYS[1], string.format('%d', token) .. ':' .. ARGV[1], 'NX', 'PX', ARGV[2])
  leave_queue()
  return {1, token, tonumber(ARGV[2])}
end
local sep = string.find(current, ':', 1, true)
if sep and string.sub(current, sep + 1) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  leave_queue()
  return {2, tonumber(string.sub(current, 1, sep - 1)), tonumber(ARGV[2])}
end
return {0, 0, redis.call('PTTL', KEYS[1])}
