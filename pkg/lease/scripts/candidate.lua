-- candidate: advertise a replica that campaigns for (or leads) a lease in the lease's
-- candidate registry, or remove it. The registry is advisory: no trust rule reads it.
--
-- KEYS[1]  candidates key  P:{NAME}:candidates, a string (only GET, SET, DEL and TIME, which
--                          the elector ACL user has already):
--                            "v1\t<written ms>\t<key ttl ms>" then one line per entry,
--                            "<instance>:<identity>\t<expiry ms>\t<last seen ms>\t<priority>\t<version>"
--                          (server ms; written + key ttl is the key's expiry, so a reader
--                          without TIME learns the server's time from GET and PTTL)
-- ARGV[1]  member          "<instance>:<identity>"
-- ARGV[2]  ttl             how long the entry lasts without a heartbeat, in milliseconds
-- ARGV[3]  priority        a decimal integer
-- ARGV[4]  version         the replica's version, without control characters
-- ARGV[5]  "leave" to remove the member instead of refreshing it
--
-- Every call drops the entries whose expiry passed (or that do not parse). The key expires a
-- ttl after its longest-lived entry, and is deleted with its last entry.
-- Reply: {now ms, entry, entry, ...}: the server's time and the live entries after the call,
-- so that the heartbeat that keeps a replica in the registry also tells it who else is there.
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
local cur = redis.call('GET', KEYS[1])
local live = {}
local maxexp = 0
if cur and string.sub(cur, 1, 3) == 'v1\t' then
  local first = true
  for line in string.gmatch(cur, '[^\n]+') do
    if first then
      first = false
    else
      local field, exp = string.match(line, '^([^\t]+)\t(%d+)\t%d+\t%-?%d+\t')
      exp = tonumber(exp)
      if field and field ~= ARGV[1] and exp > now then
        live[#live + 1] = line
        if exp > maxexp then maxexp = exp end
      end
    end
  end
end
if ARGV[5] ~= 'leave' then
  local exp = now + ttl
  live[#live + 1] = ARGV[1] .. '\t' .. string.format('%.0f', exp) .. '\t' .. string.format('%.0f', now) ..
    '\t' .. ARGV[3] .. '\t' .. ARGV[4]
  if exp > maxexp then maxexp = exp end
end
local reply = {string.format('%.0f', now)}
for i = 1, #live do reply[#reply + 1] = live[i] end
if #live == 0 then
  redis.call('DEL', KEYS[1])
  return reply
end
local keyttl = maxexp - now + ttl
redis.call('SET', KEYS[1], 'v1\t' .. string.format('%.0f', now) .. '\t' .. string.format('%.0f', keyttl) .. '\n' ..
  table.concat(live, '\n'), 'PX', string.format('%.0f', keyttl))
return reply
