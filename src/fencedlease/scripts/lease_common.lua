-- What the lease scripts share: the client prepends this file to acquire.lua, release.lua,
-- renew.lua, renew_many.lua and enqueue.lua (it defines functions only; it sends no command).
-- Tokens travel as decimal strings, never as Lua numbers (doubles, exact only up to 2^53).
local MAX_TOKEN = '9223372036854775807'
local function read(...)  -- a read that cannot abort the script: its reply, or nil and the error
  local reply = redis.pcall(...)
  if type(reply) == 'table' and reply.err then
    return nil, reply.err
  end
  return reply
end
local function is_token(s)  -- 1..2^63-1 in decimal, no sign, no leading zero
  return string.find(s, '^[1-9]%d*$') ~= nil and (#s < 19 or (#s == 19 and s <= MAX_TOKEN))
end
-- A lease key's value "<fencing_token>:<owner_token>": the token and the owner, or nil when it is
-- malformed (no ':', or a token that is not in 1..2^63-1).
local function lease_value(value)
  local token, holder = string.match(value, '^(%d+):(.+)$')
  if token and is_token(token) then
    return token, holder
  end
  return nil
end
-- The lease at `key`: its value, token and owner (false, nil, nil when the key is missing); or
-- nil, nil, nil and why it cannot be used (it cannot be read, or holds a malformed value).
local function lease_at(key)
  local value, err = read('GET', key)
  if err then
    return nil, nil, nil, 'cannot be read: ' .. err
  end
  if not value then
    return false, nil, nil
  end
  local token, holder = lease_value(value)
  if not token then
    return nil, nil, nil, 'holds a malformed value (not "<fencing_token>:<owner>")'
  end
  return value, token, holder
end
-- The type of `key` when it is neither `want` nor missing (a key a write would fail on), else nil.
local function foreign_type(key, want)
  local kind = redis.call('TYPE', key).ok
  if kind ~= want and kind ~= 'none' then
    return kind
  end
  return nil
end
-- The fencing counter's decimal successor, or nil and why there is none (see next_token below).
local function counter_successor(key)
  local counter, err = read('GET', key)
  if err then
    return nil, 'cannot be read: ' .. err
  end
  if not counter then
    return '1'
  end
  if counter ~= '0' and not is_token(counter) then
    return nil, string.find(counter, '^%-%d+$') and 'is negative' or 'is not an integer in 0..2^63-2'
  end
  if counter == MAX_TOKEN then
    return nil, 'is at 2^63-1, the largest fencing token: no next token'
  end
  local i = #counter
  while i > 0 and string.byte(counter, i) == 57 do  -- trailing 9s become 0s
    i = i - 1
  end
  if i == 0 then
    return '1' .. string.rep('0', #counter)
  end
  return string.sub(counter, 1, i - 1) .. string.char(string.byte(counter, i) + 1)
         .. string.rep('0', #counter - i)
end
-- The server's TIME in microseconds, as a decimal string (seconds and zero-padded micros joined:
-- never a Lua number, which is exact only up to 2^53). Scripts that call it begin with
-- redis.replicate_commands() (required by Redis 6.2 before a write follows TIME).
local function clock_token()
  local now = redis.call('TIME')
  return now[1] .. string.rep('0', 6 - #now[2]) .. now[2]
end
-- The token the next grant of the fencing counter at `key` issues: the counter's decimal successor
-- computed on its digits ('1' when the counter is missing), or nil and why there is none (the
-- counter cannot be read, is negative, is not an integer in 0..2^63-2, or is at 2^63-1).
-- With `mode` 'clock': the larger of that successor and the server's TIME in microseconds (see
-- clock_token), so a counter rolled back by a failover still yields a token above every earlier
-- grant's. The caller stores the token as the counter (SET, not INCR).
local function next_token(key, mode)
  local token, why = counter_successor(key)
  if token and mode == 'clock' then
    local now = clock_token()
    if #now > #token or (#now == #token and now > token) then
      return now
    end
  end
  return token, why
end
-- The replication id of the primary this script runs on (master_replid of INFO replication): a
-- promoted replica starts a new one, so a client that sees it change knows the primary changed
-- (and that a counter may have rolled back). '' when INFO is refused (an ACL without it).
local function primary_id()
  local info = redis.pcall('INFO', 'replication')
  return type(info) == 'string' and string.match(info, 'master_replid:(%x+)') or ''
end
