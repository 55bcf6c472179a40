-- The fencing rule, once in Lua: each fenced_<op>.lua script is sent after the definitions of this
-- file it uses.
-- A transcription of fencedlease._core.fencing.decide (see its docstring); the tests hold both to one model.
-- KEYS[1]  fence state key  <prefix>:{<name>}:resource:fence  a hash {token, fp, key}; no TTL, never
--          deleted by the library
-- ARGV[1]  fencing token: canonical decimal, 1..9223372036854775807 (2^63-1; checked by the client)
-- ARGV[2]  owner fingerprint of the presenting lease (16 hex), or "" when unknown (a bare int token)
-- ARGV[3]  "1" for strict fencing (equal tokens refused), "0" otherwise
-- ARGV[4]  the presenting lease's counter: its fencing scope (<prefix>:{<key>}:fence), or its key
--          when it has no scope, or "" when unknown (a bare int token)
-- ARGV[5]  the presenting lease's bare key when a record of the earlier shape holding it matches
--          the lease (the record is then replaced by ARGV[4]), or ""
-- returns  (fence_check) nil, fp_to_store, key_to_store   accepted; nothing is written yet
--          (fence_check) {0, last_token, reason[, key]}   refused: reason is "older", "strict",
--          "duplicate", or "key" (a lease of another counter; then key is the one on record)
-- Tokens are compared as decimal strings (length, then byte by byte), never as Lua numbers: Lua
-- numbers are doubles, which cannot tell 2^53 from 2^53+1. A stored token that is not a canonical
-- decimal is an error reply, not a guess.
-- The check writes nothing: the op writes its data first and then fence_commit, so an op that fails
-- (WRONGTYPE) aborts the script before the fence moved.

local function canonical_token(text)
  return type(text) == 'string' and #text <= 19
    and (text == '0' or string.match(text, '^[1-9]%d*$') ~= nil)
end

-- -1, 0 or 1 as a < b, a == b, a > b, for canonical decimals.
local function compare_tokens(a, b)
  if #a ~= #b then
    return #a < #b and -1 or 1
  end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y and -1 or 1
    end
  end
  return 0
end

local function fence_check()
  local state = redis.call('HMGET', KEYS[1], 'token', 'fp', 'key')
  local token, fp, key = ARGV[1], ARGV[2], ARGV[4]
  if not canonical_token(token) or token == '0' then
    return redis.error_reply('fenced access: token ' .. tostring(token) .. ' is not in 1..2^63-1')
  end
  if not state[1] then
    return nil, fp, key
  end
  local last = state[1]
  if not canonical_token(last) then
    return redis.error_reply('fence state of ' .. KEYS[1] .. ' holds a token that is not a canonical decimal')
  end
  local last_key = state[3] or ''
  if last_key ~= '' and key ~= '' and last_key ~= key and (ARGV[5] == '' or last_key ~= ARGV[5]) then
    return {0, last, 'key', last_key}
  end
  if key == '' then
    key = last_key
  end
  local order = compare_tokens(token, last)
  if order > 0 then
    return nil, fp, key
  end
  if order < 0 then
    return {0, last, 'older'}
  end
  if ARGV[3] == '1' then
    return {0, last, 'strict'}
  end
  local last_fp = state[2] or ''
  if last_fp ~= '' and fp ~= '' and last_fp ~= fp then
    return {0, last, 'duplicate'}
  end
  if last_fp == '' then
    return nil, fp, key
  end
  return nil, last_fp, key
end

local function fence_commit(fp, key)
  redis.call('HSET', KEYS[1], 'token', ARGV[1], 'fp', fp, 'key', key)
end

-- A fenced read (fenced_get.lua, fenced_hgetall.lua): check the token, read the data (read_data
-- sends the command), then move the fence. Returns {1, what was read}, or the refusal with
-- nothing read and nothing written.
local function fenced_read(read_data)
  local refused, fp, key = fence_check()
  if refused then
    return refused
  end
  local data = read_data()
  fence_commit(fp, key)
  return {1, data}
end
