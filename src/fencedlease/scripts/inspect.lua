-- Read a lease without changing it.
-- KEYS[1]  lease key            <prefix>:{<key>}
-- KEYS[2]  fencing counter key  <prefix>:{<key>}:fence
-- returns  {lease_value or false, pttl_ms, counter or false}
--          lease_value is "<fencing_token>:<owner_token>"; the client keeps only a fingerprint of
--          the owner token. pttl_ms is -2 when the key is missing. counter is the last token issued.
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2])}
