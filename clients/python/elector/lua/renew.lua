-- renew: extend the lease, only if it still holds this term's record.
--
-- KEYS[1]  lease key  P:{NAME}:lease
-- ARGV[1]  record     the holder's full record, as acquire returned it
-- ARGV[2]  ttl        new time to live in milliseconds
-- ARGV[3]  channel    optional: if given, "renewed <ttl> <record>" is published there, so that
--                     followers can sleep until the lease really expires instead of polling
-- KEYS[2]  resign key optional, P:{NAME}:resign: look for a request to step down (resign.lua)
--
-- Reply: 1 renewed; 0 the lease is gone or belongs to another term (never retry: step down);
--        2 renewed, and a request asks this very term to step down (only with KEYS[2]): the
--          lease is extended all the same, so that the holder stops its work within its lease,
--          and so is the request, to at least ttl, so that it outlives the winding down.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if ARGV[3] then
    redis.call('PUBLISH', ARGV[3], 'renewed ' .. ARGV[2] .. ' ' .. ARGV[1])
  end
  if KEYS[2] then
    local request = redis.call('GET', KEYS[2])
    if request then
      local phase, record = string.match(request, '^v1\n(%a+)\n%d+\n([^\n]*)\n')
      if phase == 'request' and record == ARGV[1] then
        if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[2]) then
          redis.call('PEXPIRE', KEYS[2], ARGV[2])
        end
        return 2
      end
    end
  end
  return 1
end
return 0
