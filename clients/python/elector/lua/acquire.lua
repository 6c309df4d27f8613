-- acquire: take the lease if nobody holds it, and hand out the next fencing token.
--
-- KEYS[1]  lease key   P:{NAME}:lease
-- KEYS[2]  token key   P:{NAME}:token
-- KEYS[3]  terms key   P:{NAME}:terms (optional): counts the terms begun, for observers
-- ARGV[1]  owner       "<instance>:<identity>" (the record without its version and token)
-- ARGV[2]  ttl         lease time to live in milliseconds
-- ARGV[3]  channel     P:{NAME}:events, where "acquired <ttl> <record>" is published
-- KEYS[4]  resign key  P:{NAME}:resign (optional): while it holds a reservation (release.lua),
--                      a free lease goes only to its target, or, without a target, to anyone but
--                      the resigning identity; the acquire that is let through deletes it
--
-- Reply: {1, record, ttl}  the lease is ours (newly taken, or already held by this owner: then it is
--                          renewed to ttl and the record, with its token, is the one already held);
--        {0, record, pttl} someone else holds it; pttl is its remaining time (-1: no expiry).
--        {2, record, pttl, target}  (only with KEYS[4]) the lease is free but reserved after the
--                          resignation of record for pttl more milliseconds, for target ('':
--                          anyone but record's identity), and the caller is not let in.
-- Errors: a key of the wrong type, a token key that does not hold an integer, or one whose next
--         token would exceed 2^53-1 ("ERR fencing token range exhausted"). Nothing is written.

-- Scripts that read TIME must be replicated by effects (the only mode from Redis 7 on).
if redis.replicate_commands then redis.replicate_commands() end

local current = redis.call('GET', KEYS[1])
if current then
  local token = string.match(current, '^v1:(%d+):')
  if token and current == 'v1:' .. token .. ':' .. ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, current, tonumber(ARGV[2])}
  end
  return {0, current, redis.call('PTTL', KEYS[1])}
end

local consumed = false
if KEYS[4] then
  local reservation = redis.call('GET', KEYS[4])
  if reservation then
    local phase, record, target = string.match(reservation, '^v1\n(%a+)\n%d+\n([^\n]*)\n(.*)$')
    if phase == 'reserved' then
      local caller = string.match(ARGV[1], '^[^:]*:(.*)$')
      local resigned = string.match(record, '^v1:%d+:[^:]*:(.*)$')
      if (target ~= '' and caller ~= target) or (target == '' and caller == resigned) then
        return {2, record, redis.call('PTTL', KEYS[4]), target}
      end
      consumed = true -- deleted once the term is written, not before a refusal below
    end
  end
end

-- Lua numbers are doubles: integers are exact up to 2^53 - 1 (MAX below). Past it, previous + 1
-- may round to previous or below, and two terms would share a token; refuse instead. The
-- server time in microseconds reaches MAX in the year 2255.
local MAX = 9007199254740991
local last = redis.call('GET', KEYS[2])
local previous = 0
if last then
  previous = tonumber(last)
  if not previous then
    return redis.error_reply('ERR fencing token key ' .. KEYS[2] .. ' does not hold an integer')
  end
  if previous >= MAX then
    return redis.error_reply('ERR fencing token range exhausted: token key ' .. KEYS[2] .. ' holds ' .. last ..
      ', the next token would exceed 2^53-1 (9007199254740991), the largest integer a Redis script counts exactly')
  end
end
-- The token is max(previous + 1, server time in microseconds): it keeps growing even when the
-- counter is lost (restart without persistence, failover to a lagging replica).
local now = redis.call('TIME')
local token = tonumber(now[1]) * 1000000 + tonumber(now[2])
if previous + 1 > token then token = previous + 1 end
if token > MAX then
  return redis.error_reply('ERR fencing token range exhausted: the server time in microseconds exceeds 2^53-1 (9007199254740991)')
end
token = string.format('%.0f', token)
-- Read before anything is written: a terms key of the wrong type fails the call with nothing written.
local terms = 0
if KEYS[3] then
  terms = tonumber(redis.call('GET', KEYS[3])) or 0
end

local record = 'v1:' .. token .. ':' .. ARGV[1]
redis.call('SET', KEYS[1], record, 'NX', 'PX', ARGV[2])
redis.call('SET', KEYS[2], token)
if KEYS[3] then
  redis.call('SET', KEYS[3], string.format('%.0f', terms + 1))
end
if consumed then
  redis.call('DEL', KEYS[4])
end
redis.call('PUBLISH', ARGV[3], 'acquired ' .. ARGV[2] .. ' ' .. record)
return {1, record, tonumber(ARGV[2])}
