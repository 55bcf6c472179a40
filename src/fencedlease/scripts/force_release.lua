-- Delete a lease whoever holds it (the operator's escape hatch), with its grant details: the key
-- is free at once, no lock-delay left behind.
-- KEYS[1]  lease key      <prefix>:{<key>}
-- KEYS[2]  grant details  <prefix>:{<key>}:grant (acquire.lua's: metadata and lock-delay)
-- returns  1 when the lease key existed, else 0 (the grant details are deleted either way)
local existed = redis.call('DEL', KEYS[1])
redis.call('DEL', KEYS[2])
return existed
