-- Fenced HSET: check the token and set hash fields in one step.
-- Runs after fenced_check.lua (prepended by the client), which reads KEYS[1] and ARGV[1..5].
-- KEYS[1]  fence state key  <prefix>:{<name>}:resource:fence
-- KEYS[2]  data key         <prefix>:{<name>}:resource  a hash
-- ARGV[1..5]  token, fingerprint, strict flag, lease scope, legacy key (see fenced_check.lua)
-- ARGV[6], ARGV[7], ...  field, value pairs (at least one pair; checked by the client)
-- returns  {1, added}                   accepted: added = number of fields that were new
--          {0, last_token, reason[, key]}  refused; nothing written
local refused, fp, key = fence_check()
if refused then
  return refused
end
local added = redis.call('HSET', KEYS[2], unpack(ARGV, 6))
fence_commit(fp, key)
return {1, added}
