-- fence: run one write command only if the presented fencing token is not smaller than the
-- largest token this fence has seen, and remember the token.
--
-- KEYS[1]   fence key: the largest token accepted so far (a decimal integer)
-- KEYS[2..] the keys the write touches (declared so that Cluster routes and checks them)
-- ARGV[1]   the presented token
-- ARGV[2..] the write command and its arguments, e.g. SET key value
--
-- Reply: {1, <reply of the write>} accepted; {0, <largest token seen>} rejected as stale.
local token = tonumber(ARGV[1])
if not token then
  return redis.error_reply('ERR fencing token ' .. tostring(ARGV[1]) .. ' is not an integer')
end
local seen = redis.call('GET', KEYS[1])
if seen then
  local n = tonumber(seen)
  if not n then
    return redis.error_reply('ERR fence key ' .. KEYS[1] .. ' does not hold an integer')
  end
  if token < n then
    return {0, seen}
  end
end
local reply = redis.call(unpack(ARGV, 2))
redis.call('SET', KEYS[1], ARGV[1])
return {1, reply}
