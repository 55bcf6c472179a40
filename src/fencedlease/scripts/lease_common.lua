-- What the lease scripts share: acquire.lua, release.lua, renew.lua, renew_many.lua and enqueue.lua
-- are each sent with the definitions of this file that they use (it defines functions only; it
-- sends no command; see Script.load in fencedlease._redis.scripts).
-- The hand-off queue's writing (queue_error, queue_waiter) is shared by enqueue.lua and acquire.lua,
-- which queues a refused caller that will wait.
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
-- The lease a GET of its key answered (`read`'s reply and error): its value, token and owner
-- (false, nil, nil when the key is missing); or nil, nil, nil and why it cannot be used (it
-- cannot be read, or holds a malformed value).
local function lease_of(value, err)
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
-- The lease at `key`, as lease_of tells it.
local function lease_at(key)
  return lease_of(read('GET', key))
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
-- grant's. With `mode` 'floor:<digits>' (a token, 1..2^63-1): the larger of the successor and
-- that floor, the lowest token of the failover epoch the client read from a majority
-- (fencedlease._core.epochs), so a promoted replica's first grant is above every token of an
-- older epoch. The caller stores the token as the counter (SET, not INCR) in either mode.
local function next_token(key, mode)
  local token, why = counter_successor(key)
  if not token or not mode or mode == 'counter' then
    return token, why
  end
  local low
  if mode == 'clock' then
    low = clock_token()
  elseif string.sub(mode, 1, 6) == 'floor:' and is_token(string.sub(mode, 7)) then
    low = string.sub(mode, 7)
  else
    return nil, 'cannot take the fencing mode ' .. mode
  end
  if #low > #token or (#low == #token and low > token) then
    return low
  end
  return token
end
-- The replication id of the primary this script runs on (master_replid of INFO replication): a
-- promoted replica starts a new one, so a client that sees it change knows the primary changed
-- (and that a counter may have rolled back). '' when INFO is refused (an ACL without it).
-- The field is found by a plain search, then its hex digits matched from there (an unanchored
-- pattern would try every position of the reply).
local function primary_id()
  local info = redis.pcall('INFO', 'replication')
  if type(info) ~= 'string' then
    return ''
  end
  local at = string.find(info, 'master_replid:', 1, true)
  return at and string.match(info, '^%x+', at + 14) or ''
end
-- Why the queueing arguments of a waiter (enqueue.lua, acquire.lua) cannot be used, or nil when
-- they can: `args` holds wait_ms, ttl_ms, grace_ms, listener id and flag, `names` what the error
-- calls each. wait_ms and grace_ms are decimal integers in 0..2^31-1, ttl_ms in 1..2^31-1, the
-- listener id '' or 1..32 lowercase hex digits, the flag '' or 'direct' (with a listener id).
local function queue_error(args, names)
  for i, low in ipairs({0, 1, 0}) do
    local s = args[i]
    local n = string.find(s, '^%d+$') and #s <= 10 and tonumber(s)
    if not n or n < low or n > 2147483647 then
      return names[i] .. ' must be an integer in ' .. low .. '..2147483647, got ' .. s
    end
  end
  local listener, flag = args[4] or '', args[5] or ''
  if listener ~= '' and not (#listener <= 32 and string.find(listener, '^[0-9a-f]+$')) then
    return names[4] .. ' must be 1..32 lowercase hex digits'
  end
  if flag ~= '' and (flag ~= 'direct' or listener == '') then
    return names[5] .. " must be 'direct' (with a listener id) or ''"
  end
  return nil
end
-- Queue `owner` (arguments checked by queue_error; the keys' types checked by the caller): its
-- arrival in the queue `zset` (microseconds of Redis TIME, kept when it is already queued: first
-- come, first served across its polls), its details in `hash`, "<deadline_ms>:<ttl_ms>:<grace_ms>
-- [:<listener>[:direct]]" with deadline now + wait_ms + grace_ms on Redis's clock, and both keys
-- kept for wait_ms + 2 * grace_ms at least (they expire by themselves once nobody polls).
-- The caller begins with redis.replicate_commands() (TIME before writes on Redis 6.2).
local function queue_waiter(zset, hash, owner, args)
  local clock = redis.call('TIME')
  local seconds, micros = tonumber(clock[1]), tonumber(clock[2])
  local now_ms = seconds * 1000 + math.floor(micros / 1000)
  local wait_ms, grace_ms = tonumber(args[1]), tonumber(args[3])
  local listener, flag = args[4] or '', args[5] or ''
  redis.call('ZADD', zset, 'NX', string.format('%d', seconds * 1000000 + micros), owner)
  local details = string.format('%d:%s:%d', now_ms + wait_ms + grace_ms, args[2], grace_ms)
  if listener ~= '' then  -- no listener id: the three fields alone, as release.lua parses them
    details = details .. ':' .. listener
  end
  if flag ~= '' then
    details = details .. ':' .. flag
  end
  redis.call('HSET', hash, owner, details)
  -- Both keys expire at one moment (PEXPIREAT), the later of now + keep and what either has left:
  -- set apart, the queue could go a millisecond before the details and orphan them.
  local at = now_ms + wait_ms + 2 * grace_ms
  for _, key in ipairs({zset, hash}) do
    local left = redis.call('PTTL', key)
    if left > 0 and now_ms + left > at then
      at = now_ms + left
    end
  end
  at = string.format('%d', at)
  redis.call('PEXPIREAT', zset, at)
  redis.call('PEXPIREAT', hash, at)
end
-- The grant details of the lease at `lease` (acquire.lua's "<lease>:grant": metadata and a
-- lock-delay) given the lease's new TTL `ttl` (a number, ms): expiring `delay` ms after it. A lease
-- without details costs one PEXPIRE of a missing key. The delay is read by a pcall: a foreign
-- type there fails nothing (the details then lapse with their own TTL).
local function renew_grant(lease, ttl)
  local grant = lease .. ':grant'
  if redis.call('PEXPIRE', grant, string.format('%d', ttl)) == 1 then
    local delay = redis.pcall('HGET', grant, 'delay')
    if type(delay) == 'string' and string.find(delay, '^%d+$') then
      redis.call('PEXPIRE', grant, string.format('%d', ttl + tonumber(delay)))
    end
  end
end
