#!lua flags=allow-oom
-- tiered-ratelimit: remove a cluster reservation again (src/store/redis/rollback.rs).
-- (allow-oom: it only removes, so it must run when Redis is over `maxmemory` too, as a bare
-- ZREM would.)
--
-- KEYS[1]  the tier's sorted set, where script.lua recorded the reservation
-- ARGV[1]  the member it recorded
-- ARGV[2]  the reservation's cost (decimal)
-- ARGV[3]  the score it recorded it at (µs, decimal: script.lua's now, at which it records)
--
-- Reply: 1 when the member was removed by its name; 2 when a stand-in was (below); 0 when
-- nothing was removed.
--
-- A concurrent check of the same key may have renamed the member before this runs, keeping
-- its score and cost: a plain key taking the totals form (a request of cost > 1), a totals key
-- rebased. Then an entry of the key with the same score and the same cost stands in for it:
-- the key's entries then have, as (score, cost) pairs, exactly what they would have without
-- the reservation, so its live units are the same at every instant (a totals key counts from
-- its oldest live entry to its newest by running totals, so an entry removed from its middle is
-- counted until the entries before it leave: stricter, never looser).
--
-- An entry moved back from the future (a check whose clock is behind the reservation's) is
-- renamed with a new score: no entry stands in, nothing is removed, and the reservation counts
-- until it leaves the window (stricter, never looser). The same when none of the LOOK entries
-- read at that score has the cost, or is the limiter's.
--
-- What this cannot tell: an entry recorded at exactly the reservation's microsecond after the
-- reservation left that score (moved back, trimmed, or deleted by a reset) matches as well, as
-- it would match by name when it took the reservation's freed name. docs/REDIS.md names it.
local LOOK = 1000
local key, member = KEYS[1], ARGV[1]
if redis.call('ZREM', key, member) == 1 then
  return 1
end
local cost = tonumber(ARGV[2])
for _, m in ipairs(redis.call('ZRANGEBYSCORE', key, ARGV[3], ARGV[3], 'LIMIT', '0', LOOK)) do
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
