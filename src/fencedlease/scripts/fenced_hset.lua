-- Fenced HSET: check the token and set hash fields in one step.
-- Runs after fenced_check.lua (prepended by the client), which reads KEYS[1] and ARGV[1..3].
-- KEYS[1]  fence state key  <prefix>:{<name>}:fence
-- KEYS[2]  data key         <prefix>:{<name>}        a hash
-- ARGV[1..3]  token, fingerprint, strict flag (see fenced_check.lua)
-- ARGV[4], ARGV[5], ...  field, value pairs (at least one pair; checked by the client)
-- returns  {1, added}                   accepted: added = number of fields that were new
--          {0, last_token, reason}      refused; nothing written
local refused, fp = fence_check()
if refused then
  return refused
end
local added = redis.call('HSET', KEYS[2], unpack(ARGV, 4))
fence_commit(fp)
return {1, added}
