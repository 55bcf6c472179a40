-- Renew a lease: reset its TTL if, and only if, the owner token still owns it.
-- KEYS[1]  lease key  <prefix>:{<key>}   value "<fencing_token>:<owner_token>"
-- ARGV[1]  owner token
-- ARGV[2]  new TTL in milliseconds, an integer >= 1
-- returns  the lease's fencing token (>= 1) when renewed;
--          0 when the key is missing or owned by someone else (the lease is lost);
--          an error reply when the TTL is not a positive integer.
-- Never recreates a missing key: PEXPIRE on a missing key does nothing.
local ttl = tonumber(ARGV[2])
if ttl == nil or ttl <= 0 or ttl ~= math.floor(ttl) then
  return redis.error_reply('ERR fencedlease renew: ttl_ms must be a positive integer, got ' .. ARGV[2])
end
local current = redis.call('GET', KEYS[1])
if not current then
  return 0
end
local sep = string.find(current, ':', 1, true)
if sep and string.sub(current, sep + 1) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return tonumber(string.sub(current, 1, sep - 1))
end
return 0
