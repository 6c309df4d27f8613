-- candidate: advertise a replica that campaigns for (or leads) a lease in the lease's
-- candidate registry, or remove it. The registry is advisory: no trust rule reads it.
--
-- KEYS[1]  candidates key  P:{NAME}:candidates, a hash: "<instance>:<identity>" ->
--                          "v1\n<expiry ms>\n<last seen ms>\n<priority>\n<version>" (server ms)
-- ARGV[1]  member          "<instance>:<identity>"
-- ARGV[2]  ttl             how long the entry lasts without a heartbeat, in milliseconds
-- ARGV[3]  priority        a decimal integer
-- ARGV[4]  version         the replica's version, without control characters
-- ARGV[5]  "leave" to remove the member instead of refreshing it
--
-- Every call first removes the entries whose expiry passed. The key expires 2 ttl after the
-- last heartbeat of its longest-lived entry.
-- Reply: {now ms, field, value, field, value, ...}: the server's time and the live entries
-- after the call, so that the heartbeat that keeps a replica in the registry also tells it
-- who else is there.
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
local all = redis.call('HGETALL', KEYS[1])
local live = {string.format('%.0f', now)}
for i = 1, #all, 2 do
  local exp = tonumber(string.match(all[i + 1], '^v1\n(%d+)\n'))
  if exp == nil or exp <= now then
    redis.call('HDEL', KEYS[1], all[i])
  elseif all[i] ~= ARGV[1] then
    live[#live + 1] = all[i]
    live[#live + 1] = all[i + 1]
  end
end
if ARGV[5] == 'leave' then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return live
end
local v = 'v1\n' .. string.format('%.0f', now + ttl) .. '\n' .. string.format('%.0f', now) ..
  '\n' .. ARGV[3] .. '\n' .. ARGV[4]
redis.call('HSET', KEYS[1], ARGV[1], v)
if redis.call('PTTL', KEYS[1]) < 2 * ttl then
  redis.call('PEXPIRE', KEYS[1], string.format('%.0f', 2 * ttl))
end
live[#live + 1] = ARGV[1]
live[#live + 1] = v
return live
