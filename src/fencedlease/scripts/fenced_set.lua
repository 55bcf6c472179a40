-- Fenced SET: check the token and set the value in one step.
-- Runs after fenced_check.lua (prepended by the client), which reads KEYS[1] and ARGV[1..5].
-- KEYS[1]  fence state key  <prefix>:{<name>}:resource:fence
-- KEYS[2]  data key         <prefix>:{<name>}:resource  a string
-- ARGV[1..5]  token, fingerprint, strict flag, lease scope, legacy key (see fenced_check.lua)
-- ARGV[6]  the value to SET
-- returns  {1}                          accepted: the value is set and the fence moved
--          {0, last_token, reason[, key]}  refused; nothing written
local refused, fp, key = fence_check()
if refused then
  return refused
end
redis.call('SET', KEYS[2], ARGV[6])
fence_commit(fp, key)
return {1}
