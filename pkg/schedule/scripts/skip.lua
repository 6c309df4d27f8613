-- skip: decide slots without running them, fenced by the term's token: move the cursor to
-- last, so that no slot at or before it is claimed as a new slot, and record the skipped
-- slots as missed (count of them, first to last, and why). With count 0 nothing is recorded:
-- that is how a term starts a schedule that has no state yet (the cursor at the server's now).
--
-- KEYS[1]  lease key     P:{NAME}:lease
-- KEYS[2]  schedule key  P:{NAME}:schedule  (claim.lua describes the state)
-- KEYS[3]  runs key      P:{NAME}:runs      the history, newest line first
-- ARGV[1]  token         the term's fencing token (decimal)
-- ARGV[2]  first         the first skipped slot, ms since 1970
-- ARGV[3]  last          the last skipped slot, ms since 1970: the new cursor
-- ARGV[4]  count         how many slots from first to last are skipped
-- ARGV[5]  reason        why (catch-up, deadline, overlap, ...): one word or more, no newline
-- ARGV[6]  keep          how many lines the history keeps
-- ARGV[7]  spec          the term's schedule and its time zone (claim.lua's ARGV[6] and [7]):
-- ARGV[8]  zone          written into the state also when nothing else changes (a term starts)
--
-- The history gets "missed <first> <last> <count> <reason>". A run of an ended term found in
-- the state is recorded as lost first, as claim.lua does; the run record is otherwise kept.
--
-- Reply {code, now}, now the server time in ms:
--   {1, now}   the cursor is at last (moved, or a new state)
--   {0, now}   fenced: the lease does not hold this token's term; nothing written
--   {2, now}   the cursor was at or past last already; nothing recorded (a lost run, a new
--              spec or zone written)
if redis.replicate_commands then redis.replicate_commands() end

local token, first, last, count, reason, keep =
  ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6])
local spec, zone = ARGV[7], ARGV[8]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local holder = redis.call('GET', KEYS[1])
if not holder or string.match(holder, '^v1:(%d+):') ~= token then
  return {0, now}
end
if string.find(reason, '\n', 1, true) then
  return redis.error_reply('ERR skip reason must not contain a newline')
end
if not spec or not zone or string.find(spec .. zone, '\n', 1, true) then
  return redis.error_reply('ERR schedule spec and zone must be given, one line each')
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

local s = {cursor = 0, slot = 0, phase = 'none', attempt = 0, token = '', started = '0', ended = '0', exit = '0',
  spec = '', zone = '', record = ''}
local v = redis.call('GET', KEYS[2])
if v then
  local ver, c, sl, ph, at, tk, st, en, ex, rest = string.match(v,
    '^v([12])\n(%d+)\n(%d+)\n(%a+)\n(%d+)\n(%d*)\n(%d+)\n(%d+)\n(%-?%d+)\n(.*)$')
  local sp, zn, rec = '', '', rest
  if ver == '2' then sp, zn, rec = string.match(rest, '^([^\n]*)\n([^\n]*)\n(.*)$') end
  if not c or not rec then
    return redis.error_reply('ERR schedule key ' .. KEYS[2] .. ' does not hold a schedule state')
  end
  s = {cursor = tonumber(c), slot = tonumber(sl), phase = ph, attempt = tonumber(at), token = tk,
    started = st, ended = en, exit = ex, spec = sp, zone = zn, record = rec}
end

local dirty = s.spec ~= spec or s.zone ~= zone
if s.phase == 'running' and s.token ~= token then
  s.phase, s.ended, s.exit = 'lost', num(now), '-1'
  push('run ' .. num(s.slot) .. ' lost ' .. num(s.attempt) .. ' ' .. s.token .. ' ' .. s.started .. ' ' ..
    s.ended .. ' -1 ' .. s.record)
  dirty = true
end

local code = 2
if last > s.cursor or not v then
  s.cursor = last
  if count > 0 then
    push('missed ' .. num(first) .. ' ' .. num(last) .. ' ' .. num(count) .. ' ' .. reason)
  end
  dirty, code = true, 1
end
if dirty then
  redis.call('SET', KEYS[2], 'v2\n' .. num(s.cursor) .. '\n' .. num(s.slot) .. '\n' .. s.phase .. '\n' ..
    num(s.attempt) .. '\n' .. s.token .. '\n' .. s.started .. '\n' .. s.ended .. '\n' .. s.exit .. '\n' ..
    spec .. '\n' .. zone .. '\n' .. s.record)
end
return {code, now}
