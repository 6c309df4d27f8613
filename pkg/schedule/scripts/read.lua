-- read: the server's time and a schedule's state, for the term that plans its next step (a
-- script only for the time: the plan's clock is Redis's, as claim.lua's).
--
-- KEYS[1]  schedule key  P:{NAME}:schedule  (claim.lua describes the state)
-- KEYS[2]  runs key      P:{NAME}:runs (optional): the history too
--
-- Reply {now, state, runs}: now the server time in ms; state and runs the keys' values, or
-- nil where a key is absent (runs also when KEYS[2] is not given). Writes nothing.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local state = redis.call('GET', KEYS[1])
local runs = false
if KEYS[2] then runs = redis.call('GET', KEYS[2]) end
return {now, state, runs}
