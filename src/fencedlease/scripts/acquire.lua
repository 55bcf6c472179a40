-- Acquire a lease and its fencing token in one atomic step.
-- KEYS[1]  lease key            <prefix>:{<key>}         value "<fencing_token>:<owner_token>", has a TTL
-- KEYS[2]  fencing counter key  <prefix>:{<key>}:fence   an integer, no TTL, never deleted by the library
-- KEYS[3]  waiter queue         <prefix>:{<key>}:waiters       (fencedlease._handoff)
-- KEYS[4]  waiter details       <prefix>:{<key>}:waiters:meta
-- ARGV[1]  owner token (128 random bits, hex; any string without meaning to Redis)
-- ARGV[2]  TTL in milliseconds, an integer 1..2147483647 (validated by the client)
-- returns  {1, "fencing_token", ttl_ms}  granted now: the counter was INCRed once
--          {2, "fencing_token", ttl_ms}  already ours: a retried acquire after a lost reply, or a
--                                        waiter claiming the lease a release handed it (that
--                                        release issued the token): the stored token, TTL reset,
--                                        no INCR here
--          {0, 0, pttl_ms}               held by another owner; its remaining TTL in milliseconds
--          an error reply "ERR fencedlease acquire: ...", with nothing written, when ARGV[2] is
--          not a decimal integer in 1..2^31-1, a key holds another type (or cannot be read), the lease key
--          holds a malformed value, or the counter is not an integer in 0..2^63-2 (at 2^63-1 the
--          next token would not exist).
-- Tokens travel as decimal strings, never as Lua numbers (doubles, exact only up to 2^53): the
-- next token is the counter's successor computed on its digits, and the INCR's own reply is not
-- used.
-- Every read and type check comes before the first write, so a key of a foreign type, a
-- malformed value or a spent counter aborts the script with nothing written; the writes that
-- follow cannot fail on the keys' contents (only a command an ACL denies can still fail there:
-- the manager then releases with the same owner token).
-- An owner that holds the lease is taken out of the waiter queue (first, before the lease is
-- written), so no later release hands the key to a waiter that is no longer waiting.
local MAX_TOKEN = '9223372036854775807'
local owner = ARGV[1]
-- ARGV[2] reaches SET PX / PEXPIRE as given: decimal digits only ('1e3' and '1.0' are numbers to
-- Lua but not to SET, which would fail after the INCR), in 1..2^31-1.
local ttl = string.find(ARGV[2], '^[1-9]%d*$') and #ARGV[2] <= 10 and tonumber(ARGV[2])
if not ttl or ttl > 2147483647 then
  return redis.error_reply('ERR fencedlease acquire: ttl_ms must be a positive integer (at most 2147483647), got '
                           .. ARGV[2])
end
local function refuse(role, key, why)
  return redis.error_reply('ERR fencedlease acquire: the ' .. role .. ' ' .. key .. ' ' .. why)
end
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
local current, err = read('GET', KEYS[1])
if err then
  return refuse('lease key', KEYS[1], 'cannot be read: ' .. err)
end
local token
if current then
  local holder
  token, holder = string.match(current, '^(%d+):(.+)$')
  if not (token and is_token(token)) then
    return refuse('lease key', KEYS[1], 'holds a malformed value (not "<fencing_token>:<owner>")')
  end
  if holder ~= owner then
    return {0, 0, redis.call('PTTL', KEYS[1])}
  end
else
  local counter
  counter, err = read('GET', KEYS[2])
  if err then
    return refuse('fencing counter', KEYS[2], 'cannot be read: ' .. err)
  end
  if not counter then
    token = '1'
  elseif counter ~= '0' and not is_token(counter) then
    local why = string.find(counter, '^%-%d+$') and 'is negative' or 'is not an integer in 0..2^63-2'
    return refuse('fencing counter', KEYS[2], why)
  elseif counter == MAX_TOKEN then
    return refuse('fencing counter', KEYS[2], 'is at 2^63-1, the largest fencing token: no next token')
  else  -- the decimal successor of counter
    local i = #counter
    while i > 0 and string.byte(counter, i) == 57 do
      i = i - 1
    end
    if i == 0 then
      token = '1' .. string.rep('0', #counter)
    else
      token = string.sub(counter, 1, i - 1) .. string.char(string.byte(counter, i) + 1)
              .. string.rep('0', #counter - i)
    end
  end
end
local queued
queued, err = read('ZSCORE', KEYS[3], owner)  -- no entry: the common case, no queue write
if err then
  return refuse('waiter queue', KEYS[3], 'cannot be read: ' .. err)
end
if queued then
  local kind = redis.call('TYPE', KEYS[4]).ok
  if kind ~= 'hash' and kind ~= 'none' then
    return refuse('waiter details', KEYS[4], 'hold a ' .. kind .. ', not a hash')
  end
  redis.call('ZREM', KEYS[3], owner)
  redis.call('HDEL', KEYS[4], owner)
end
if current then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {2, token, ttl}
end
redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], token .. ':' .. owner, 'PX', ARGV[2])
return {1, token, ttl}
