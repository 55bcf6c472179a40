-- Read a lease without changing it.
-- KEYS[1]  lease key            <prefix>:{<key>}
-- KEYS[2]  fencing counter key  <prefix>:{<key>}:fence
-- returns  {lease_value or false, pttl_ms, counter or false, primary, previous, grant_token,
--           metadata}
--          lease_value is "<fencing_token>:<owner_token>"; the client keeps only a fingerprint of
--          the owner token. pttl_ms is -2 when the key is missing. counter is the last token issued.
--          Both values are returned as stored (strings) and checked by the client.
--          primary is this primary's replication id (master_replid), previous the id of the
--          primary it was promoted from (master_replid2; '' when it was never promoted, or
--          when INFO is refused).
--          grant_token and metadata: the fields token and metadata of the grant details
--          <lease key>:grant (acquire.lua's; false when missing); the metadata belongs to the
--          lease only when grant_token is its token (checked by the client).
--          An error reply "ERR fencedlease inspect: ..." when a key holds another type.
local replies = {}
for i, role in ipairs({'lease key', 'fencing counter'}) do
  local value = redis.pcall('GET', KEYS[i])
  if type(value) == 'table' then
    return redis.error_reply('ERR fencedlease inspect: the ' .. role .. ' ' .. KEYS[i]
                             .. ' cannot be read: ' .. tostring(value.err))
  end
  replies[i] = value
end
local info = redis.pcall('INFO', 'replication')  -- refused by an ACL: '' (nothing known)
if type(info) ~= 'string' then
  info = ''
end
local previous = string.match(info, 'master_replid2:(%x+)') or ''
if not string.find(previous, '[1-9a-f]') then
  previous = ''  -- all zeros: never promoted
end
local grant = redis.pcall('HMGET', KEYS[1] .. ':grant', 'token', 'metadata')
if type(grant) ~= 'table' or grant.err then
  grant = {false, false}  -- details of a foreign type: no metadata
end
return {replies[1], redis.call('PTTL', KEYS[1]), replies[2],
        string.match(info, 'master_replid:(%x+)') or '', previous, grant[1], grant[2]}
