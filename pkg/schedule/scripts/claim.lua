-- claim: start a run of one slot of a lease's schedule, fenced by the term's token: only the
-- term the lease holds may claim, a slot is never claimed while a run of this term goes on,
-- and a slot that is decided (done, missed, or passed by the cursor) is never claimed again.
--
-- KEYS[1]  lease key     P:{NAME}:lease
-- KEYS[2]  schedule key  P:{NAME}:schedule  the state: "v2\n<cursor>\n<slot>\n<phase>\n<attempt>\n
--                        <token>\n<started>\n<ended>\n<exit>\n<spec>\n<zone>\n<record>" (times in
--                        server ms); "v1" lacks <spec> and <zone> (read, and written as v2)
-- KEYS[3]  runs key      P:{NAME}:runs      the history, newest line first (finish.lua, skip.lua)
-- ARGV[1]  token         the term's fencing token (decimal)
-- ARGV[2]  slot          the slot's scheduled time, ms since 1970
-- ARGV[3]  max attempts  how many attempts a slot gets (>= 1)
-- ARGV[4]  deadline      the starting deadline in ms: a slot claimed later is missed (0: none)
-- ARGV[5]  keep          how many lines the history keeps
-- ARGV[6]  spec          the term's schedule (cron spec, one line): kept in the state, for status
-- ARGV[7]  zone          the spec's time zone (IANA name, one line): kept likewise
--
-- The clock is Redis's (TIME): the slot must have come and the deadline not passed by the
-- server's time, whatever the caller's clock says.
--
-- Reply {code, n, now, lost}, now the server time in ms, lost 1 when a run of an ended term was
-- found and recorded as lost (a history line "run <slot> lost ..."):
--   {1, attempt}  claimed: run the slot; attempt 1, or the next after a failed or lost attempt
--                 (the same reply again for this term's own claim of the slot that is running)
--   {0, 0}        fenced: the lease does not hold this token's term; nothing written
--   {-1, 0}       early: the slot's time has not come by the server's clock; nothing written
--   {2, 0}        decided: the slot is done, missed, or at or before the cursor
--   {3, slot}     busy: this term already runs another slot (slot); nothing written
--   {4, 0}        late: past the starting deadline; recorded as missed ("deadline")
--   {5, attempt}  exhausted: the slot had max attempts; recorded as missed ("attempts")
if redis.replicate_commands then redis.replicate_commands() end

local token, slot = ARGV[1], tonumber(ARGV[2])
local max, deadline, keep = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local spec, zone = ARGV[6], ARGV[7]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local holder = redis.call('GET', KEYS[1])
if not holder or string.match(holder, '^v1:(%d+):') ~= token then
  return {0, 0, now, 0}
end
if slot > now then
  return {-1, 0, now, 0}
end

local function num(x) return string.format('%.0f', x) end

local function push(line)
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
end

if not spec or not zone or string.find(spec .. zone, '\n', 1, true) then
  return redis.error_reply('ERR schedule spec and zone must be given, one line each')
end
local s = {cursor = 0, slot = 0, phase = 'none', attempt = 0, token = '', started = '0', ended = '0', exit = '0', record = ''}
local v = redis.call('GET', KEYS[2])
if v then
  local ver, c, sl, ph, at, tk, st, en, ex, rec = string.match(v,
    '^v([12])\n(%d+)\n(%d+)\n(%a+)\n(%d+)\n(%d*)\n(%d+)\n(%d+)\n(%-?%d+)\n(.*)$')
  if ver == '2' then rec = string.match(rec, '^[^\n]*\n[^\n]*\n(.*)$') end
  if not c or not rec then
    return redis.error_reply('ERR schedule key ' .. KEYS[2] .. ' does not hold a schedule state')
  end
  s = {cursor = tonumber(c), slot = tonumber(sl), phase = ph, attempt = tonumber(at), token = tk,
    started = st, ended = en, exit = ex, record = rec}
end

local function write()
  redis.call('SET', KEYS[2], 'v2\n' .. num(s.cursor) .. '\n' .. num(s.slot) .. '\n' .. s.phase .. '\n' ..
    num(s.attempt) .. '\n' .. s.token .. '\n' .. s.started .. '\n' .. s.ended .. '\n' .. s.exit .. '\n' ..
    spec .. '\n' .. zone .. '\n' .. s.record)
end

if s.phase == 'running' and s.token == token then
  if s.slot == slot then
    return {1, s.attempt, now, 0}
  end
  return {3, s.slot, now, 0}
end

-- A run of another term is over: the lease holds this token, so that term ended (its work was
-- told to stop before its lease could expire). Record it as lost; its slot may be run again.
local lost = 0
if s.phase == 'running' then
  s.phase, s.ended, s.exit = 'lost', num(now), '-1'
  push('run ' .. num(s.slot) .. ' lost ' .. num(s.attempt) .. ' ' .. s.token .. ' ' .. s.started .. ' ' ..
    s.ended .. ' -1 ' .. s.record)
  lost = 1
end

local attempt = 1
if s.slot == slot and (s.phase == 'failed' or s.phase == 'lost') then
  if s.attempt >= max then
    s.phase = 'missed'
    if slot > s.cursor then s.cursor = slot end
    push('missed ' .. num(slot) .. ' ' .. num(slot) .. ' 1 attempts')
    write()
    return {5, s.attempt, now, lost}
  end
  attempt = s.attempt + 1
elseif slot <= s.cursor then
  if lost == 1 then write() end
  return {2, 0, now, lost}
end

if deadline > 0 and now - slot > deadline then
  if s.slot == slot then s.phase = 'missed' end
  if slot > s.cursor then s.cursor = slot end
  push('missed ' .. num(slot) .. ' ' .. num(slot) .. ' 1 deadline')
  write()
  return {4, 0, now, lost}
end

if slot > s.cursor then s.cursor = slot end
s.slot, s.phase, s.attempt, s.token = slot, 'running', attempt, token
s.started, s.ended, s.exit, s.record = num(now), '0', '0', holder
write()
return {1, attempt, now, lost}
