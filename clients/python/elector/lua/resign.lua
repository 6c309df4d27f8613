-- resign: ask the current holder of the lease to step down (a planned switchover).
--
-- KEYS[1]  lease key   P:{NAME}:lease
-- KEYS[2]  resign key  P:{NAME}:resign
-- ARGV[1]  hold_ms     the hold-off: how long the reservation lasts once the holder released
-- ARGV[2]  target      the only identity that may acquire during the hold-off; '' for anyone
--                      but the resigning identity
-- ARGV[3]  ttl         time to live of the request in milliseconds (the requester's patience;
--                      the holder's renewals extend it while it winds down)
-- ARGV[4]  channel     P:{NAME}:events, where "resign <hold_ms> <record>" is published
-- ARGV[5]  record      optional: write the request only if this record holds the lease
--
-- The request "v1\nrequest\n<hold_ms>\n<record>\n<target>" names the current record: a later
-- term is never asked to step down by a request meant for an earlier one.
--
-- Reply: {1, record}   the request for record (the current holder) is written;
--        {0, ''}       nobody holds the lease: nothing written;
--        {-1, record}  ARGV[5] was given and record, another term, holds the lease: nothing written.
-- Errors: "ERR resign target is the holder" when ARGV[2] is the holder's identity; a lease key
--         that does not hold a record. Nothing is written.
local current = redis.call('GET', KEYS[1])
if not current then
  return {0, ''}
end
if ARGV[5] and ARGV[5] ~= current then
  return {-1, current}
end
local identity = string.match(current, '^v1:%d+:[^:]*:(.*)$')
if not identity then
  return redis.error_reply('ERR lease key ' .. KEYS[1] .. ' does not hold an elector record')
end
if ARGV[2] ~= '' and ARGV[2] == identity then
  return redis.error_reply('ERR resign target is the holder: ' .. identity .. ' holds the lease already')
end
redis.call('SET', KEYS[2], 'v1\nrequest\n' .. ARGV[1] .. '\n' .. current .. '\n' .. ARGV[2], 'PX', ARGV[3])
redis.call('PUBLISH', ARGV[4], 'resign ' .. ARGV[1] .. ' ' .. current)
return {1, current}
