-- finish: record how this term's run of a slot ended, fenced by the term's token: only while
-- the lease still holds the term, so that a holder whose term ended (a paused process, a lost
-- renewal) cannot mark a slot done that a later term may already run again.
--
-- KEYS[1]  lease key     P:{NAME}:lease
-- KEYS[2]  schedule key  P:{NAME}:schedule  (claim.lua describes the state; v1 stays v1)
-- KEYS[3]  runs key      P:{NAME}:runs      the history, newest line first
-- ARGV[1]  token         the term's fencing token (decimal)
-- ARGV[2]  slot          the slot's scheduled time, ms since 1970, as claimed
-- ARGV[3]  attempt       the attempt claim.lua returned
-- ARGV[4]  result        done (the job succeeded), failed, lost (the term's ctx ended first) or
--                        cancelled (the next slot's overlap policy stopped it)
-- ARGV[5]  exit          the job's exit code (decimal)
-- ARGV[6]  keep          how many lines the history keeps
-- KEYS[4]  done key      P:{NAME}:done (optional, elector run --once-per): with ARGV[7], a done
-- ARGV[7]  period        run also writes the done mark "v1\n<ended>\n<exit>\n<record>", to expire
--                        period ms after the run's start (none when that has passed already)
--
-- The run ends at the server's time (TIME); the history gets
-- "run <slot> <result> <attempt> <token> <started> <ended> <exit> <record>".
--
-- Reply {code, now, mark}, now the server time in ms, mark how many ms the done mark holds
-- (0: none written, or no done key given):
--   {1, now, mark}  written (or written before with the same result: a retry after a lost reply)
--   {0, now, 0}     fenced: the lease does not hold this token's term; nothing written
--   {-1, now, 0}    the state holds no such running attempt of this term; nothing written
if redis.replicate_commands then redis.replicate_commands() end

local token, slot, attempt, result, exit, keep =
  ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5], tonumber(ARGV[6])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local holder = redis.call('GET', KEYS[1])
if not holder or string.match(holder, '^v1:(%d+):') ~= token then
  return {0, now, 0}
end
if result ~= 'done' and result ~= 'failed' and result ~= 'lost' and result ~= 'cancelled' then
  return redis.error_reply('ERR finish result ' .. tostring(result) .. ' is none of done, failed, lost, cancelled')
end
local v = redis.call('GET', KEYS[2])
if not v then
  return {-1, now, 0}
end
local ver, c, sl, ph, at, tk, st, rest = string.match(v, '^(v[12])\n(%d+)\n(%d+)\n(%a+)\n(%d+)\n(%d*)\n(%d+)\n(.*)$')
if not c or tonumber(sl) ~= slot or tonumber(at) ~= attempt or tk ~= token then
  return {-1, now, 0}
end
local marks = KEYS[4] and ARGV[7] and result == 'done'
if ph ~= 'running' then
  if ph == result then
    local left = 0
    if marks then left = math.max(redis.call('PTTL', KEYS[4]), 0) end
    return {1, now, left}
  end
  return {-1, now, 0}
end
-- The tail after <exit> is kept as it is: <record> (v1), or <spec>\n<zone>\n<record> (v2).
local tail = string.match(rest, '^%d+\n%-?%d+\n(.*)$')
local record = tail
if ver == 'v2' and tail then record = string.match(tail, '^[^\n]*\n[^\n]*\n(.*)$') end
if not record then
  return {-1, now, 0}
end
local ended = string.format('%.0f', now)
-- The done mark first: a write it may not make (an ACL) then fails the step whole.
local left = 0
if marks then
  left = tonumber(st) + tonumber(ARGV[7]) - now
  if left >= 1 then
    redis.call('SET', KEYS[4], 'v1\n' .. ended .. '\n' .. exit .. '\n' .. record, 'PX', string.format('%.0f', left))
  else
    left = 0
  end
end
redis.call('SET', KEYS[2], ver .. '\n' .. c .. '\n' .. sl .. '\n' .. result .. '\n' .. at .. '\n' .. tk .. '\n' ..
  st .. '\n' .. ended .. '\n' .. exit .. '\n' .. tail)

local line = 'run ' .. sl .. ' ' .. result .. ' ' .. at .. ' ' .. tk .. ' ' .. st .. ' ' .. ended .. ' ' .. exit .. ' ' .. record
local h = redis.call('GET', KEYS[3])
if h then h = line .. '\n' .. h else h = line end
local n, pos = 0, 0
while true do
  pos = string.find(h, '\n', pos + 1, true)
  if not pos then break end
  n = n + 1
  if n >= keep then
    h = string.sub(h, 1, pos - 1)
    break
  end
end
redis.call('SET', KEYS[3], h)
return {1, now, left}
