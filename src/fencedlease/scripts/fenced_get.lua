-- Fenced read of a string: check the token, move the fence, then GET, in one step.
-- Moving the fence on a read is the point: once the new holder has read, a stale holder can no longer
-- write under the value it read (the lost update of docs/fencing.md).
-- Runs after fenced_check.lua (prepended by the client), which reads KEYS[1] and ARGV[1..5]
-- and defines fenced_read.
-- KEYS[1]  fence state key  <prefix>:{<name>}:resource:fence
-- KEYS[2]  data key         <prefix>:{<name>}:resource  a string, or missing
-- ARGV[1..5]  token, fingerprint, strict flag, lease scope, legacy key (see fenced_check.lua)
-- returns  {1, value}                   accepted; value is nil when the key is missing
--          {0, last_token, reason[, key]}  refused; nothing written, nothing read
return fenced_read(function()
  return redis.call('GET', KEYS[2])
end)
