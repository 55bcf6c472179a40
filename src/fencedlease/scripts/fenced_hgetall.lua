-- Fenced read of a hash: check the token, move the fence, then HGETALL, in one step.
-- Runs after fenced_check.lua (prepended by the client), which reads KEYS[1] and ARGV[1..3].
-- KEYS[1]  fence state key  <prefix>:{<name>}:fence
-- KEYS[2]  data key         <prefix>:{<name>}        a hash, or missing
-- ARGV[1..3]  token, fingerprint, strict flag (see fenced_check.lua)
-- returns  {1, {field, value, ...}}     accepted; an empty list when the key is missing
--          {0, last_token, reason}      refused; nothing written, nothing read
local refused, fp = fence_check()
if refused then
  return refused
end
local fields = redis.call('HGETALL', KEYS[2])
fence_commit(fp)
return {1, fields}
