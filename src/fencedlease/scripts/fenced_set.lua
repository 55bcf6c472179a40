-- Fenced SET: check the token and set the value in one step.
-- Runs after fenced_check.lua (prepended by the client), which reads KEYS[1] and ARGV[1..3].
-- KEYS[1]  fence state key  <prefix>:{<name>}:fence
-- KEYS[2]  data key         <prefix>:{<name>}        a string
-- ARGV[1..3]  token, fingerprint, strict flag (see fenced_check.lua)
-- ARGV[4]  the value to SET
-- returns  {1}                          accepted: the value is set and the fence moved
--          {0, last_token, reason}      refused; nothing written
local refused, fp = fence_check()
if refused then
  return refused
end
redis.call('SET', KEYS[2], ARGV[4])
fence_commit(fp)
return {1}
