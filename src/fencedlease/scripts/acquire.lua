-- Acquire a lease and its fencing token in one atomic step.
-- KEYS[1]  lease key            <prefix>:{<key>}         value "<fencing_token>:<owner_token>", has a TTL
-- KEYS[2]  fencing counter key  <prefix>:{<key>}:fence   an integer, no TTL, never deleted by the library
-- KEYS[3]  waiter queue         <prefix>:{<key>}:waiters       (fencedlease._handoff)
-- KEYS[4]  waiter details       <prefix>:{<key>}:waiters:meta
-- ARGV[1]  owner token (128 random bits, hex; any string without meaning to Redis)
-- ARGV[2]  TTL in milliseconds, an integer 1..2147483647 (validated by the client)
-- ARGV[3]  fencing mode: 'counter' (or missing), 'clock' or 'floor:<token>' (next_token in
--          lease_common.lua)
-- ARGV[4]  optional, 'primary': report the primary's replication id on a refusal too (INFO
--          replication, dearer than the rest of the script: a client asks once per connection,
--          see fencedlease._redis.wire), else '' in its place; a grant (1 or 2) reports it then
--          too, since a grant is where a rolled-back counter repeats a token. 'known': no INFO
--          at all, primary '' in every reply: the client answers with the id its connection
--          read, which it may do only where no connection outlives a promotion of its server
--          (Redis Sentinel's, see fencedlease._redis.wire.PrimaryReads); and the common grant
--          (below) answers its token alone, a string: the client knows the rest (a table reply
--          costs Redis about 2 us more)
-- ARGV[5..8] optional: wait_ms, grace_ms, listener id, flag ('' or 'direct'): a caller that will
--          wait queues itself in the same script when refused (as enqueue.lua's ARGV[2], [4], [5],
--          [6], with ARGV[2] its ttl_ms), so no queueing round trip follows; ARGV[4] is then '',
--          'primary' or 'known', never missing
-- ARGV[5]  or 'leave' alone: the last attempt of a caller that queued for a hand-off (and gives
--          up when refused): refused, it is taken out of the waiter queue instead, in the same
--          script, so no later release hands the key to a caller that has gone
-- ARGV[9..10] optional: the grant's extras, after ARGV[5..8] ('' each where the call neither
--          queues nor leaves, 'leave' then '' where it leaves): ARGV[9] its metadata (a JSON
--          object, checked by the client; '' for none), ARGV[10] its lock-delay in milliseconds
--          (decimal digits, 0..2147483647; '' or '0' for none). They are stored with the lease in
--          the hash <prefix>:{<key>}:grant (fields token, metadata, delay; in the lease key's
--          hash slot, named from KEYS[1]), which expires lock-delay milliseconds after the lease,
--          is renewed with it and deleted by a release: while it holds a delay and the lease key
--          is gone (expired, never released), the key is refused as if held, with the delay left.
-- returns  {1, "fencing_token", ttl_ms, primary}  granted now: the counter was INCRed once (and,
--                                        in 'clock' or 'floor:' mode, then set to the token)
--          {2, "fencing_token", ttl_ms, primary}  already ours: a retried acquire after a lost reply, or a
--                                        waiter claiming the lease a release handed it (that
--                                        release issued the token): the stored token, TTL reset,
--                                        no INCR here
--          {0, 0, pttl_ms, primary}      held by another owner; its remaining TTL in milliseconds
--                                        (with ARGV[5..8]: the caller is queued, see queue_waiter;
--                                        with 'leave': it is out of the queue)
--          primary is the replication id of the primary that answered (primary_id), on every
--          grant and on a refusal when ARGV[4] asks for it ('' else, and always with 'known'):
--          the client tells a failover by its change. A server demoted and promoted again by
--          REPLICAOF or FAILOVER keeps its clients' connections (Redis 6.2 and 7.0), so a grant
--          trusts no id a connection read before unless ARGV[4] is 'known'.
--          an error reply "ERR fencedlease acquire: ...", with nothing written, when ARGV[2] is
--          not a decimal integer in 1..2^31-1, ARGV[5..8] are given and not as queue_error wants,
--          a key holds another type (or cannot be read), the lease key
--          holds a malformed value, or the counter is not an integer in 0..2^63-2 (at 2^63-1 the
--          next token would not exist).
-- Tokens travel as decimal strings, never as Lua numbers (doubles, exact only up to 2^53): the
-- next token is the counter's successor computed on its digits, or (the common grant below) the
-- INCR's own reply only while it is below 2^53, else the counter read back after the INCR.
-- Every read and type check comes before the first write (the common grant's INCR is its
-- counter's check: it fails writing nothing), so a key of a foreign type, a
-- malformed value or a spent counter aborts the script with nothing written; the writes that
-- follow cannot fail on the keys' contents (only a command an ACL denies can still fail there:
-- the manager then releases with the same owner token).
-- An owner that holds the lease is taken out of the waiter queue (first, before the lease is
-- written), so no later release hands the key to a waiter that is no longer waiting.
-- The common grant (no queueing arguments, 'counter' mode, neither the lease key nor the waiter
-- queue exists: one EXISTS) is served first, before the definitions only the other cases use are
-- made (each costs Redis's time on every run): its INCR is the counter's read and its write, and
-- fails, writing nothing, on a counter that is not an integer or is at 2^63-1 (those cases and an
-- ACL's refusal go on below, where next_token says why). Its reply is the token when it is exact
-- as a Lua number (below 2^53; the counter is read back as a string above it). A reply below 1
-- means a negative counter: a SET (KEEPTTL) puts back its value (nothing changed) and the general
-- path below refuses it.
-- Uses lease_common.lua's primary_id (the common grant's only definition), read, lease_at,
-- next_token, foreign_type, queue_error, queue_waiter (see Script.load).
redis.replicate_commands()  -- TIME and INFO before writes; required by Redis 6.2, a no-op from 7.0
local owner = ARGV[1]
local primary = ARGV[4] == 'primary' and primary_id() or ''
local known = ARGV[4] == 'known'  -- the client's connection knows the id: no INFO here
-- ARGV[2] reaches SET PX / PEXPIRE as given: decimal digits only ('1e3' and '1.0' are numbers to
-- Lua but not to SET, which would fail after the INCR), in 1..2^31-1.
local ttl = string.find(ARGV[2], '^[1-9]%d*$') and #ARGV[2] <= 10 and tonumber(ARGV[2])
if not ttl or ttl > 2147483647 then
  return redis.error_reply('ERR fencedlease acquire: ttl_ms must be a positive integer (at most 2147483647), got '
                           .. ARGV[2])
end
local counting = not ARGV[3] or ARGV[3] == 'counter'
if not ARGV[5] and counting and redis.call('EXISTS', KEYS[1], KEYS[3], KEYS[1] .. ':grant') == 0 then
  local n = redis.pcall('INCR', KEYS[2])
  if type(n) == 'number' and n > 0 then
    local token = n < 9007199254740992 and string.format('%d', n) or redis.call('GET', KEYS[2])
    if primary == '' and not known then
      primary = primary_id()
    end
    redis.call('SET', KEYS[1], token .. ':' .. owner, 'PX', ARGV[2])
    if known then
      return token
    end
    return {1, token, ttl, primary}
  elseif type(n) == 'number' then  -- a negative counter: put back as it was, refused below
    local back = n > -9007199254740992 and string.format('%d', n - 1)
    if not back then  -- "-<digits>" after the INCR: the digits' successor, on the digits
      local digits = string.sub(redis.call('GET', KEYS[2]), 2)
      local i = #digits
      while i > 0 and string.byte(digits, i) == 57 do  -- trailing 9s become 0s
        i = i - 1
      end
      back = i == 0 and '-1' .. string.rep('0', #digits)
             or '-' .. string.sub(digits, 1, i - 1) .. string.char(string.byte(digits, i) + 1)
                .. string.rep('0', #digits - i)
    end
    redis.call('SET', KEYS[2], back, 'KEEPTTL')
  end
end
-- [shared definitions used below]
local function refuse(role, key, why)
  return redis.error_reply('ERR fencedlease acquire: the ' .. role .. ' ' .. key .. ' ' .. why)
end
local leave = ARGV[5] == 'leave' and (ARGV[6] or '') == ''
local queue = ARGV[5] and ARGV[5] ~= '' and not leave
              and {ARGV[5], ARGV[2], ARGV[6] or '', ARGV[7], ARGV[8]}
local grant, metadata, delay = KEYS[1] .. ':grant', ARGV[9] or '', ARGV[10] or ''
if delay ~= '' and not (string.find(delay, '^%d+$') and #delay <= 10 and tonumber(delay) <= 2147483647) then
  return redis.error_reply('ERR fencedlease acquire: lock_delay_ms must be an integer in 0..2147483647, got '
                           .. delay)
end
delay = tonumber(delay) or 0
if queue then
  local problem = queue_error(queue, {'ARGV[5]', 'ARGV[2]', 'ARGV[6]', 'ARGV[7]', 'ARGV[8]'})
  if problem then
    return redis.error_reply('ERR fencedlease acquire: ' .. problem)
  end
end
local current, token, holder, why = lease_at(KEYS[1])
if why then
  return refuse('lease key', KEYS[1], why)
end
-- A lease that ended unreleased: its grant's lock-delay, while it lasts, refuses the key (read
-- only when the lease key is gone: a held key's polls cost nothing more).
local delayed = false
if not current then
  local kind = foreign_type(grant, 'hash')
  if kind then
    return refuse('grant details', grant, 'hold a ' .. kind .. ', not a hash')
  end
  delayed = redis.call('HGET', grant, 'delay') and redis.call('PTTL', grant)
  if delayed and delayed <= 0 then
    delayed = false
  end
end
if current or delayed then
  if delayed or holder ~= owner then
    if queue or leave then  -- refused: queue the caller, which waits next; or take it out
      for i, want in ipairs({'zset', 'hash'}) do
        local kind = foreign_type(KEYS[i + 2], want)
        if kind then
          return refuse(i == 1 and 'waiter queue' or 'waiter details', KEYS[i + 2],
                        'hold a ' .. kind .. ', not a ' .. want)
        end
      end
      if queue then
        queue_waiter(KEYS[3], KEYS[4], owner, queue)
      else
        redis.call('ZREM', KEYS[3], owner)
        redis.call('HDEL', KEYS[4], owner)
      end
    end
    return {0, 0, delayed or redis.call('PTTL', KEYS[1]), primary}
  end
else
  token, why = next_token(KEYS[2], ARGV[3])
  if not token then
    return refuse('fencing counter', KEYS[2], why)
  end
end
local queued, err = read('ZSCORE', KEYS[3], owner)  -- no entry: the common case, no queue write
if err then
  return refuse('waiter queue', KEYS[3], 'cannot be read: ' .. err)
end
if queued then
  local kind = foreign_type(KEYS[4], 'hash')
  if kind then
    return refuse('waiter details', KEYS[4], 'hold a ' .. kind .. ', not a hash')
  end
  redis.call('ZREM', KEYS[3], owner)
  redis.call('HDEL', KEYS[4], owner)
end
if primary == '' and not known then
  primary = primary_id()
end
-- The grant's extras, written with the lease: an older grant's never outlive it.
local function store_grant()
  redis.call('DEL', grant)
  if metadata ~= '' or delay > 0 then
    local fields = {'token', token}
    if metadata ~= '' then
      fields[#fields + 1], fields[#fields + 2] = 'metadata', metadata
    end
    if delay > 0 then
      fields[#fields + 1], fields[#fields + 2] = 'delay', string.format('%d', delay)
    end
    redis.call('HSET', grant, unpack(fields))
    redis.call('PEXPIRE', grant, string.format('%d', ttl + delay))
  end
end
if current then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  store_grant()
  return {2, token, ttl, primary}
end
redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], token .. ':' .. owner, 'PX', ARGV[2])
store_grant()
if not counting then
  redis.call('SET', KEYS[2], token)  -- the counter reaches the token (>= the INCR's value)
end
return {1, token, ttl, primary}
