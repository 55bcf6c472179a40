-- Fenced access without data: check the token and move the fence (a guard before other commands).
-- Runs after fenced_check.lua (prepended by the client), which reads KEYS[1] and ARGV[1..3].
-- KEYS[1]  fence state key  <prefix>:{<name>}:fence
-- KEYS[2]  data key         <prefix>:{<name>}        (unused here; passed so every script has one shape)
-- ARGV[1..3]  token, fingerprint, strict flag (see fenced_check.lua)
-- returns  {1}                          accepted
--          {0, last_token, reason}      refused; nothing written
local refused, fp = fence_check()
if refused then
  return refused
end
fence_commit(fp)
return {1}
