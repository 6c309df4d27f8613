-- renew: extend the lease, only if it still holds this term's record.
--
-- KEYS[1]  lease key  P:{NAME}:lease
-- ARGV[1]  record     the holder's full record, as acquire returned it
-- ARGV[2]  ttl        new time to live in milliseconds
-- ARGV[3]  channel    optional: if given, "renewed <ttl> <record>" is published there, so that
--                     followers can sleep until the lease really expires instead of polling
--
-- Reply: 1 renewed; 0 the lease is gone or belongs to another term (never retry: step down).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if ARGV[3] then
    redis.call('PUBLISH', ARGV[3], 'renewed ' .. ARGV[2] .. ' ' .. ARGV[1])
  end
  return 1
end
return 0
