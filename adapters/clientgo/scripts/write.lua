-- write: compare-and-set of a client-go LeaderElectionRecord, with a fencing token per term.
--
-- client-go's LeaderElector does optimistic concurrency: it reads the record, decides by itself
-- whether the lease is free (its own clock, the record's leaseDurationSeconds), then writes only
-- if nobody wrote in between. On the API server resourceVersion does the "in between" check; here
-- it is the whole stored value: the write succeeds only if the key still holds the bytes that the
-- writer last read (or is still absent, for a create).
--
-- KEYS[1]  record key  P:{NAME}:clientgo
-- KEYS[2]  token key   P:{NAME}:clientgo-token
-- ARGV[1]  expected    the value last read; "" means the key must be absent (create)
-- ARGV[2]  record      the new value (LeaderElectionRecord as JSON)
-- ARGV[3]  new term    "1" when the write begins a term (a new holder): hand out the next token
--
-- The record key has no expiry, like a Lease object: a released record (holder "") keeps
-- leaderTransitions, and a crashed leader's record stays until a candidate has seen it unchanged
-- for a lease duration and takes it over. A plain SET also clears the expiry that records written
-- by earlier versions carried.
--
-- Reply: {1, token}    written; token is the fencing token of the holder's term (0 if unknown)
--        {0, current}  not written: current is the stored value, false when the key is absent
-- Errors: a key of the wrong type, or a token key that does not hold an integer.

-- Scripts that read TIME must be replicated by effects (the only mode from Redis 7 on).
if redis.replicate_commands then redis.replicate_commands() end

local current = redis.call('GET', KEYS[1])
if ARGV[1] == '' then
  if current then return {0, current} end
elseif current ~= ARGV[1] then
  return {0, current}
end

local last = redis.call('GET', KEYS[2])
local previous = 0
if last then
  previous = tonumber(last)
  if not previous then
    return redis.error_reply('ERR fencing token key ' .. KEYS[2] .. ' does not hold an integer')
  end
end

local token = previous
if ARGV[3] == '1' then
  -- The rule of docs/PROTOCOL.md: max(previous + 1, server time in microseconds), so that tokens
  -- keep growing even when Redis lost the counter.
  local now = redis.call('TIME')
  token = tonumber(now[1]) * 1000000 + tonumber(now[2])
  if previous + 1 > token then token = previous + 1 end
  redis.call('SET', KEYS[2], string.format('%.0f', token))
end

redis.call('SET', KEYS[1], ARGV[2])
return {1, string.format('%.0f', token)}
