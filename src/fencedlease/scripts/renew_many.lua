-- Renew a batch of leases in one command: for each, reset its TTL if, and only if, the owner token
-- still owns it (renew.lua, once per key). The renewer sends one call per batch instead of a
-- pipeline of one call per lease: one command to build and one reply to parse.
-- KEYS[i]      lease key of lease i  <prefix>:{<key>}   value "<fencing_token>:<owner_token>"
-- ARGV[2i-1]   owner token of lease i
-- ARGV[2i]     new TTL of lease i in milliseconds, an integer >= 1
-- ARGV[2n+1]   optional, 'joined': the replies as one string instead of an array (below)
-- returns      an array, one entry per lease: its fencing token (a decimal string, 1..2^63-1)
--              when renewed; 0 when the key is missing or another owner's (the lease is lost);
--              -1 when its TTL is not a positive integer; -2 when the key holds another type or
--              cannot be read; -3 when it holds a malformed value (-1..-3: that key untouched).
--              With 'joined': the same entries as one bulk string, separated by single spaces
--              ('' for no lease): one reply the client reads at once instead of one per lease.
-- Never recreates a missing key. One key's error does not fail the others' renewals: every read
-- is a pcall, and the only write, PEXPIRE on a string key just read, cannot fail on the key's
-- contents. The token is returned as stored, never through a Lua number (exact only to 2^53).
-- Keys of a batch may lie in different hash slots: for a single Redis (not Redis Cluster).
-- Each lease's grant details (acquire.lua's <prefix>:{<key>}:grant, in the lease key's slot) are
-- renewed with it.
-- Runs after lease_common.lua (prepended by the client): lease_value, renew_grant.
local replies = {}
for i = 1, #KEYS do
  -- the TTL reaches PEXPIRE as given: decimal digits only, in 1..2^31-1 (a '1e3' PEXPIRE would
  -- fail after the earlier leases' writes)
  local owner, ttl = ARGV[2 * i - 1], string.find(ARGV[2 * i] or '', '^[1-9]%d*$') and #ARGV[2 * i] <= 10
                                      and tonumber(ARGV[2 * i])
  if not ttl or ttl > 2147483647 then
    replies[i] = -1
  else
    local current = redis.pcall('GET', KEYS[i])
    if type(current) == 'table' then
      replies[i] = -2
    elseif not current then
      replies[i] = 0
    else
      local token, holder = lease_value(current)
      if not token then
        replies[i] = -3
      elseif holder == owner then
        redis.call('PEXPIRE', KEYS[i], ARGV[2 * i])
        renew_grant(KEYS[i], ttl)
        replies[i] = token
      else
        replies[i] = 0
      end
    end
  end
end
if ARGV[2 * #KEYS + 1] == 'joined' then
  return table.concat(replies, ' ')
end
return replies
