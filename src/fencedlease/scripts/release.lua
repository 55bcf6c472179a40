-- Release a lease: if, and only if, the owner token still owns it, hand it to the oldest live
-- waiter (fencedlease._handoff), or else delete it.
-- KEYS[1]  lease key       <prefix>:{<key>}               value "<fencing_token>:<owner_token>"
-- KEYS[2]  fencing counter <prefix>:{<key>}:fence         INCRed only when handing the lease over
-- KEYS[3]  waiter queue    <prefix>:{<key>}:waiters       sorted set: owner token -> arrival us
-- KEYS[4]  waiter details  <prefix>:{<key>}:waiters:meta  hash: owner ->
--                          "<deadline_ms>:<ttl_ms>:<grace_ms>[:<listener>[:direct]]" (enqueue.lua)
-- ARGV[1]  owner token
-- ARGV[2]  fencing mode of a hand-off grant: 'counter' (or missing), 'clock' or 'floor:<token>'
--          (next_token)
-- ARGV[3]  optional: 'shard' to wake by SPUBLISH (a Redis Cluster's sharded pub/sub, Redis 7+),
--          falling back to PUBLISH where SPUBLISH is unknown (Redis 6.2); else PUBLISH
-- returns  1 when released: the key was deleted, or granted to the oldest live waiter;
--          0 when the key is missing or owned by someone else (nothing touched but the caller's
--            own queue entry);
--          an error reply "ERR fencedlease release: ...", with nothing written, when a key holds
--            another type (or cannot be read), the lease key a malformed value, or, when a
--            hand-off may follow, the counter is not an integer in 0..2^63-2.
-- Every read and type check comes before the first write, and every field of a waiter's details
-- is checked before it reaches the SET; so the writes cannot fail on the keys' contents, and the wake-up PUBLISH is a pcall (a channel an ACL denies costs the waiter one poll).
-- A release deletes the lease's grant details with it (<lease key>:grant, acquire.lua's: metadata
-- and a lock-delay, which a release ends at once).
-- Hand-off (when nobody waits the release is ZCARD, GET, DEL). Waiters are queued
-- by enqueue.lua; all four keys share the hash tag, so they live in one Redis Cluster slot. The oldest
-- waiter whose deadline (Redis TIME) has not passed, and who is not the releasing owner, is granted
-- the lease as a new grant: the fencing counter KEYS[2] is INCRed (in 'clock' mode then set to the token), the key is set
-- to "<token>:<waiter's owner token>" with PX px, and the waiter is woken by PUBLISH on
-- "<lease key>:handoff:<listener>" (the channel only the waiter's own process listens on, so no
-- other process wakes; "<lease key>:handoff" for an entry without a listener id) with the grant:
-- "<sha1>:<token>:<px>", sha1 the SHA-1 of the waiter's owner token (never the token itself).
-- A waiter that claims (acquire.lua's "already ours" path resets the TTL) gets PX
-- min(ttl_ms, deadline - now + grace_ms): a waiter that died meanwhile blocks the key briefly.
-- A waiter queued 'direct' takes the lease from the message with no claim (fencedlease._handoff):
-- the message says PX ttl_ms and ends in ":<primary>", the primary's replication id
-- (primary_id; '' when INFO is refused), which a grant reports as acquire.lua's do; the key is
-- set with the short PX above and given ttl_ms (PEXPIRE, in the same script) only when PUBLISH
-- says a listener received the message (a closed manager or a dead process has none).
-- The new token is the counter's decimal successor computed on its digits (never a Lua number,
-- exact only up to 2^53).
-- So a releasing holder cannot barge ahead of the queue: waiters are served first come, first
-- served (the direct hand-off of Go's sync.Mutex in starvation mode; Redisson's fair lock queue).
-- A lost notification costs the waiter one retry delay: its next poll finds the key already its own.
-- The releasing owner leaves the waiter queue first, whatever else happens: a waiter that gives up
-- (or is cancelled) releases with its owner token, which both drops its queue entry and passes on
-- a lease that was handed to it meanwhile.
-- The common release (nobody waits; the lease key missing, or holding a well-formed value) is
-- served first, before any definition is made (each costs Redis's time on every run): its check of
-- the value is lease_value's (lease_common.lua), written out; any other case goes on below.
-- Uses lease_common.lua's lease_of, next_token, foreign_type, primary_id (see Script.load).
redis.replicate_commands()  -- TIME and INFO below; required by Redis 6.2, a no-op from 7.0
local owner = ARGV[1]
local waiting = redis.pcall('ZCARD', KEYS[3])  -- pcalls: an error reply is refused below
local value = redis.pcall('GET', KEYS[1])
if waiting == 0 then
  if value == false then
    return 0
  end
  local token, holder
  if type(value) == 'string' then
    token, holder = string.match(value, '^(%d+):(.+)$')
  end
  if token and string.byte(token) ~= 48 and (#token < 19 or (#token == 19 and token <= '9223372036854775807')) then
    if holder ~= owner then
      return 0
    end
    redis.call('DEL', KEYS[1], KEYS[1] .. ':grant')
    return 1
  end
end
-- [shared definitions used below]
local function refuse(role, key, why)
  return redis.error_reply('ERR fencedlease release: the ' .. role .. ' ' .. key .. ' ' .. why)
end
local MAX_MS = 2147483647
local function bounded(s, low, high)  -- a decimal integer in low..high (at most 15 digits), or nil
  if not (s and string.find(s, '^%d+$') and #s <= 15) then
    return nil
  end
  local n = tonumber(s)
  if n < low or n > high then
    return nil
  end
  return n
end
-- A waiter's details "<deadline_ms>:<ttl_ms>:<grace_ms>[:<listener>[:direct]]", every field
-- checked before it reaches a write (a deadline in 1..10^15-1, ttl_ms in 1..2^31-1, grace_ms in
-- 0..2^31-1, the listener id 0..32 lowercase hex digits): the numbers, the listener id ('' for
-- none) and whether the waiter takes the grant from the message, or nil for an entry that does
-- not parse (dropped like a dead waiter).
local function parse_details(info)
  local d, t, g, rest = string.match(info, '^(%d+):(%d+):(%d+)(.*)$')
  local l, flag = '', ''
  if rest ~= '' then
    l, flag = string.match(rest or '', '^:([0-9a-f]+)(.*)$')
  end
  local deadline, ttl_ms, grace_ms = bounded(d, 1, 999999999999999), bounded(t, 1, MAX_MS),
                                     bounded(g, 0, MAX_MS)
  if deadline and ttl_ms and grace_ms and l and #l <= 32 and (flag == '' or flag == ':direct') then
    return deadline, ttl_ms, grace_ms, l, flag == ':direct'
  end
  return nil
end
if type(waiting) == 'table' then
  return refuse('waiter queue', KEYS[3], 'cannot be read: ' .. waiting.err)
end
local current, _, holder, why = lease_of(value, type(value) == 'table' and value.err or nil)
if why then
  return refuse('lease key', KEYS[1], why)
end
local ours = current and holder == owner
local queued, handed_token = false, nil
if waiting > 0 then
  local kind = foreign_type(KEYS[4], 'hash')
  if kind then
    return refuse('waiter details', KEYS[4], 'hold a ' .. kind .. ', not a hash')
  end
  queued = redis.call('ZSCORE', KEYS[3], owner)
  if ours then  -- a hand-off may follow: its token must exist
    handed_token, why = next_token(KEYS[2], ARGV[2])
    if not handed_token then
      return refuse('fencing counter', KEYS[2], why)
    end
  end
end
-- Writes only from here on.
if queued then
  redis.call('ZREM', KEYS[3], owner)
  redis.call('HDEL', KEYS[4], owner)
  waiting = waiting - 1
end
if not ours then
  return 0
end
if waiting > 0 then
  local clock = redis.call('TIME')
  local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
  while true do
    local head = redis.call('ZPOPMIN', KEYS[3])
    if #head == 0 then
      break
    end
    local waiter = head[1]
    local info = redis.call('HGET', KEYS[4], waiter)
    redis.call('HDEL', KEYS[4], waiter)
    local deadline, ttl_ms, grace_ms, listener, direct = nil, nil, nil, nil, false
    if info and waiter ~= owner then
      deadline, ttl_ms, grace_ms, listener, direct = parse_details(info)
    end
    if deadline and deadline > now_ms then  -- a malformed entry is dropped like a dead one
      local channel = KEYS[1] .. ':handoff'
      if listener ~= '' then
        channel = channel .. ':' .. listener
      end
      -- 1 <= px <= ttl_ms <= 2^31-1: a PX that SET takes, whatever the entry held
      local short = math.min(ttl_ms, deadline - now_ms + grace_ms)
      local px = direct and ttl_ms or short
      -- A waiter taking the grant from the message gets the whole ttl_ms only once the message
      -- reached a listener (PUBLISH's count): a closed manager or a dead process has none, and
      -- its grant keeps the claiming waiter's short PX.
      redis.call('DEL', KEYS[1] .. ':grant')  -- the releasing holder's; the waiter's claim writes its own
      redis.call('INCR', KEYS[2])
      redis.call('SET', KEYS[1], handed_token .. ':' .. waiter, 'PX', string.format('%d', short))
      if ARGV[2] and ARGV[2] ~= 'counter' then
        redis.call('SET', KEYS[2], handed_token)  -- the counter reaches the token
      end
      local grant = string.format('%s:%s:%d', redis.sha1hex(waiter), handed_token, px)
      if direct then
        grant = grant .. ':' .. primary_id()
      end
      local sent = ARGV[3] == 'shard' and redis.pcall('SPUBLISH', channel, grant)
      if not sent or (type(sent) == 'table' and sent.err) then
        sent = redis.pcall('PUBLISH', channel, grant)
      end
      if direct and px > short and type(sent) == 'number' and sent > 0 then
        redis.call('PEXPIRE', KEYS[1], string.format('%d', px))
      end
      return 1
    end
  end
end
redis.call('DEL', KEYS[1], KEYS[1] .. ':grant')
return 1
