-- release: delete the lease, only if it still holds this term's record, and tell the followers.
--
-- KEYS[1]  lease key  P:{NAME}:lease
-- ARGV[1]  record     the holder's full record, as acquire returned it
-- ARGV[2]  channel    P:{NAME}:events, where "released 0 <record>" is published
-- KEYS[2]  resign key optional, P:{NAME}:resign: a request that asks this term to step down
--                     (resign.lua) becomes the reservation "v1\nreserved\n<hold_ms>\n<record>\n
--                     <target>", which expires after hold_ms; until then acquire.lua lets only
--                     the target (or, without one, anyone but the resigning identity) acquire
--
-- Reply: 1 released; 0 the lease is gone or belongs to another term (nothing changed).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if KEYS[2] then
    local request = redis.call('GET', KEYS[2])
    if request then
      local phase, hold, record, target = string.match(request, '^v1\n(%a+)\n(%d+)\n([^\n]*)\n(.*)$')
      if phase == 'request' and record == ARGV[1] and tonumber(hold) > 0 then
        redis.call('SET', KEYS[2], 'v1\nreserved\n' .. hold .. '\n' .. record .. '\n' .. target, 'PX', hold)
      end
    end
  end
  redis.call('PUBLISH', ARGV[2], 'released 0 ' .. ARGV[1])
  return 1
end
return 0
