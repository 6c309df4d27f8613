-- renew_many: renew many leases in one call, each exactly as renew.lua renews it with its lease
-- key alone and no channel: N independent owner-checked renewals, run atomically.
--
-- KEYS[i]    lease key i  P:{NAME_i}:lease; every key must be on the server that runs the
--                         script: one standalone server, or leases of one Redis Cluster slot
-- ARGV[1]    ttl          new time to live in milliseconds, of every lease
-- ARGV[i+1]  record i     the holder's full record of lease i, as acquire returned it
--
-- Reply: an array, one element per key, in order: 1 renewed; 0 the lease is gone or belongs
--        to another term (never retry: step down); or the error of that key's GET (a key of
--        another type), which fails that lease's renewal alone, as renew.lua would fail.
if #ARGV ~= #KEYS + 1 then
  return redis.error_reply('ERR renew_many wants a ttl and then one record per key')
end
local replies = {}
for i = 1, #KEYS do
  local value = redis.pcall('GET', KEYS[i])
  if type(value) == 'table' then
    replies[i] = value
  elseif value == ARGV[i + 1] then
    redis.call('PEXPIRE', KEYS[i], ARGV[1])
    replies[i] = 1
  else
    replies[i] = 0
  end
end
return replies
