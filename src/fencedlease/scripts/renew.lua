-- Renew a lease: reset its TTL if, and only if, the owner token still owns it.
-- KEYS[1]  lease key  <prefix>:{<key>}   value "<fencing_token>:<owner_token>"
-- ARGV[1]  owner token
-- ARGV[2]  new TTL in milliseconds, an integer >= 1
-- returns  the lease's fencing token (a decimal string, 1..2^63-1) when renewed;
--          0 when the key is missing or owned by someone else (the lease is lost);
--          an error reply "ERR fencedlease renew: ...", with nothing written, when the TTL is not
--          a positive integer, the key holds another type (or cannot be read) or a malformed value.
-- Never recreates a missing key: PEXPIRE on a missing key does nothing. The token is returned as
-- stored, never through a Lua number (a double: exact only up to 2^53).
-- The lease's grant details (acquire.lua's <prefix>:{<key>}:grant) are renewed with it.
-- Runs after lease_common.lua (prepended by the client): lease_at, renew_grant.
-- ARGV[2] reaches PEXPIRE as given: decimal digits only, in 1..2^31-1.
local ttl = string.find(ARGV[2], '^[1-9]%d*$') and #ARGV[2] <= 10 and tonumber(ARGV[2])
if not ttl or ttl > 2147483647 then
  return redis.error_reply('ERR fencedlease renew: ttl_ms must be a positive integer, got ' .. ARGV[2])
end
local current, token, holder, why = lease_at(KEYS[1])
if why then
  return redis.error_reply('ERR fencedlease renew: the lease key ' .. KEYS[1] .. ' ' .. why)
end
if current and holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  renew_grant(KEYS[1], ttl)
  return token
end
return 0
