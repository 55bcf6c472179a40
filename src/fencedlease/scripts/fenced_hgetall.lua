-- Fenced read of a hash: check the token, move the fence, then HGETALL, in one step.
-- Runs after fenced_check.lua (prepended by the client), which reads KEYS[1] and ARGV[1..5]
-- and defines fenced_read.
-- KEYS[1]  fence state key  <prefix>:{<name>}:resource:fence
-- KEYS[2]  data key         <prefix>:{<name>}:resource  a hash, or missing
-- ARGV[1..5]  token, fingerprint, strict flag, lease scope, legacy key (see fenced_check.lua)
-- returns  {1, {field, value, ...}}     accepted; an empty list when the key is missing
--          {0, last_token, reason[, key]}  refused; nothing written, nothing read
return fenced_read(function()
  return redis.call('HGETALL', KEYS[2])
end)
