-- release: delete the lease, only if it still holds this term's record, and tell the followers.
--
-- KEYS[1]  lease key  P:{NAME}:lease
-- ARGV[1]  record     the holder's full record, as acquire returned it
-- ARGV[2]  channel    P:{NAME}:events, where "released 0 <record>" is published
--
-- Reply: 1 released; 0 the lease is gone or belongs to another term (nothing changed).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], 'released 0 ' .. ARGV[1])
  return 1
end
return 0
