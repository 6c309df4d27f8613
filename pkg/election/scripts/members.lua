-- members: keep this replica in a group's membership and count the live members.
--
-- KEYS[1]  members key  P:{GROUP}:members, a sorted set: member -> expiry (server ms)
-- ARGV[1]  member       "<instance>:<identity>"
-- ARGV[2]  ttl          how long the membership lasts without a heartbeat, in milliseconds
-- ARGV[3]  "leave" to remove the member instead of refreshing it
--
-- Reply: the live members after the call, each "<instance>:<identity>", in no set order: their
--        count is the group's size, and a member missing from one reply to the next has left
--        or died.
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', now))
if ARGV[3] == 'leave' then
  redis.call('ZREM', KEYS[1], ARGV[1])
else
  redis.call('ZADD', KEYS[1], string.format('%.0f', now + ttl), ARGV[1])
end
-- The set disappears with the last member.
redis.call('PEXPIRE', KEYS[1], string.format('%.0f', 2 * ttl))
return redis.call('ZRANGE', KEYS[1], 0, -1)
