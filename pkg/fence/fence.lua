-- fence: run one write command only if the presented fencing token is not smaller than the
-- largest token this fence has seen, and remember the token.
--
-- KEYS[1]   fence key: the largest token accepted so far (a decimal integer)
-- KEYS[2..] the keys the write touches (declared so that Cluster routes and checks them)
-- ARGV[1]   the presented token (a decimal integer)
-- ARGV[2..] the write command and its arguments, e.g. SET key value
--
-- Reply: {1, <reply of the write>} accepted; {0, <largest token seen>} rejected as stale.
--
-- Tokens are compared as decimal strings, never as Lua numbers: numbers are doubles, and past
-- 2^53 two different tokens can convert to the same double (a stale token would pass).

-- digits returns s without leading zeros when s is a non-negative decimal integer, else nil.
local function digits(s)
  local d = string.match(s, '^0*(%d+)$')
  return d
end

-- less reports whether decimal a is smaller than decimal b (both as returned by digits).
local function less(a, b)
  if #a ~= #b then
    return #a < #b
  end
  return a < b
end

local token = digits(ARGV[1])
if not token then
  return redis.error_reply('ERR fencing token ' .. tostring(ARGV[1]) .. ' is not an integer')
end
local seen = redis.call('GET', KEYS[1])
if seen then
  local n = digits(seen)
  if not n then
    return redis.error_reply('ERR fence key ' .. KEYS[1] .. ' does not hold an integer')
  end
  if less(token, n) then
    return {0, seen}
  end
end
local reply = redis.call(unpack(ARGV, 2))
redis.call('SET', KEYS[1], ARGV[1])
return {1, reply}
