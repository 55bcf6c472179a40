-- Renew a batch of leases in one command: for each, reset its TTL if, and only if, the owner token
-- still owns it (renew.lua, once per key). The renewer sends one call per batch instead of a
-- pipeline of one call per lease: one command to build and one reply to parse.
-- KEYS[i]      lease key of lease i  <prefix>:{<key>}   value "<fencing_token>:<owner_token>"
-- ARGV[2i-1]   owner token of lease i
-- ARGV[2i]     new TTL of lease i in milliseconds, an integer >= 1
-- returns      an array, one integer per lease: its fencing token (>= 1) when renewed; 0 when the
--              key is missing or another owner's (the lease is lost); -1 when its TTL is not a
--              positive integer; -2 when the key holds another type (nothing touched).
-- Never recreates a missing key. One key's error does not fail the others' renewals.
-- Keys of a batch may lie in different hash slots: for a single Redis (not Redis Cluster).
local replies = {}
for i = 1, #KEYS do
  local owner, ttl = ARGV[2 * i - 1], tonumber(ARGV[2 * i])
  if ttl == nil or ttl < 1 or ttl ~= math.floor(ttl) then
    replies[i] = -1
  else
    local current = redis.pcall('GET', KEYS[i])
    if type(current) == 'table' then
      replies[i] = -2
    elseif not current then
      replies[i] = 0
    else
      local sep = string.find(current, ':', 1, true)
      if sep and string.sub(current, sep + 1) == owner then
        redis.call('PEXPIRE', KEYS[i], ARGV[2 * i])
        replies[i] = tonumber(string.sub(current, 1, sep - 1))
      else
        replies[i] = 0
      end
    end
  end
end
return replies
