-- Release a lease: delete the key if, and only if, the owner token still owns it.
-- KEYS[1]  lease key  <prefix>:{<key>}   value "<fencing_token>:<owner_token>"
-- ARGV[1]  owner token
-- returns  1 when deleted; 0 when the key is missing or owned by someone else (nothing touched).
-- The fencing counter is left alone: the next grant must get a larger token.
local current = redis.call('GET', KEYS[1])
if not current then
  return 0
end
local sep = string.find(current, ':', 1, true)
if sep and string.sub(current, sep + 1) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
