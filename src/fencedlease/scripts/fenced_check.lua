-- The fencing rule, once in Lua: the client prepends this file to each fenced_<op>.lua script.
-- A transcription of fencedlease._fencing.decide (see its docstring); the tests hold both to one model.
-- KEYS[1]  fence state key  <prefix>:{<name>}:fence  a hash {token, fp}; no TTL, never deleted by the library
-- ARGV[1]  fencing token, decimal, 0..2^53-1 (validated by the client: Lua numbers are doubles)
-- ARGV[2]  owner fingerprint of the presenting lease (16 hex), or "" when unknown (a bare int token)
-- ARGV[3]  "1" for strict fencing (equal tokens refused), "0" otherwise
-- returns  (fence_check) nil, fp_to_store   when the access is accepted; nothing is written yet
--          (fence_check) {0, last_token, reason}   refused: reason is "older", "strict" or "duplicate"
-- The check writes nothing: the op writes its data first and then fence_commit, so an op that fails
-- (WRONGTYPE) aborts the script before the fence moved.
local function fence_check()
  local state = redis.call('HMGET', KEYS[1], 'token', 'fp')
  local fp = ARGV[2]
  if not state[1] then
    return nil, fp
  end
  local token = tonumber(ARGV[1])
  local last = tonumber(state[1])
  if token > last then
    return nil, fp
  end
  if token < last then
    return {0, state[1], 'older'}
  end
  if ARGV[3] == '1' then
    return {0, state[1], 'strict'}
  end
  local last_fp = state[2] or ''
  if last_fp ~= '' and fp ~= '' and last_fp ~= fp then
    return {0, state[1], 'duplicate'}
  end
  if last_fp == '' then
    return nil, fp
  end
  return nil, last_fp
end

local function fence_commit(fp)
  redis.call('HSET', KEYS[1], 'token', ARGV[1], 'fp', fp)
end
