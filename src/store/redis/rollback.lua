#!lua
-- tiered-ratelimit: remove a cluster reservation again (src/store/redis/rollback.rs).
--
-- KEYS[1]  the tier's sorted set, where script.lua recorded the reservation
-- ARGV[1]  the member it recorded
-- ARGV[2]  the reservation's cost (decimal)
-- ARGV[3]  the time the check recorded it at (µs, decimal: script.lua's now; an entry is never
--          scored later than the time it was recorded at, a clamp only moves entries back)
--
-- Reply: 1 when the member was removed by its name; 2 when a stand-in was (below); 0 when
-- nothing was removed.
--
-- A concurrent check of the same key may have renamed the member before this runs: a plain key
-- taking the totals form (a request of cost > 1), a totals key rebased, a plain entry moved back
-- from the future (a clock behind). The reservation is then still in the key under another
-- name (unless trimmed: see below), with the same cost, scored at or before ARGV[3]. So the
-- oldest entry of the key with that cost, scored at or before ARGV[3], stands in for it: its
-- rank is at or before the reservation's, so it leaves the window no later than the
-- reservation would. The key then holds exactly one entry fewer, and at every instant its live
-- units are at least those of the key without the reservation: never looser, and stricter only
-- until the stand-in's time has passed. (A totals key counts from its oldest live entry to its
-- newest by running totals, so an entry removed from its middle is counted until the entries
-- before it leave: stricter still, never looser.)
--
-- Members the limiter did not write are never taken as a stand-in. At most LOOK entries are
-- read: when none of them stands in, nothing is removed, and the reservation counts until it
-- leaves the window (stricter for that long).
--
-- What this cannot tell: a reservation renamed and then trimmed before this runs (which needs
-- a check whose clock is a window past the reservation's time, while the request is in
-- flight) has no entry left, but an entry recorded after the trim by a clock behind it may
-- match. docs/REDIS.md names it.
local LOOK = 1000
local key, member = KEYS[1], ARGV[1]
if redis.call('ZREM', key, member) == 1 then
  return 1
end
local cost = tonumber(ARGV[2])
for _, m in ipairs(redis.call('ZRANGEBYSCORE', key, '-inf', ARGV[3], 'LIMIT', '0', LOOK)) do
  local c
  if string.byte(m, 17) == 58 then -- ':' totals: "<total>:<cost>", both hex
    if string.find(m, '^%x+:%x+$') then
      c = tonumber(string.sub(m, 18), 16)
    end
  elseif string.find(m, '^%d+$') or string.find(m, '^%d+%-%d+$') then
    c = 1 -- plain: one unit each
  end
  if c == cost then
    redis.call('ZREM', key, m)
    return 2
  end
end
return 0
