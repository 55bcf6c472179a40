-- Fenced access without data: check the token and move the fence (a guard before other commands).
-- Runs after fenced_check.lua (prepended by the client), which reads KEYS[1] and ARGV[1..5].
-- KEYS[1]  fence state key  <prefix>:{<name>}:resource:fence
-- KEYS[2]  data key         <prefix>:{<name>}:resource  (unused here; passed so every script has one shape)
-- ARGV[1..5]  token, fingerprint, strict flag, lease scope, legacy key (see fenced_check.lua)
-- returns  {1}                          accepted
--          {0, last_token, reason[, key]}  refused; nothing written
local refused, fp, key = fence_check()
if refused then
  return refused
end
fence_commit(fp, key)
return {1}
