#!lua flags=allow-oom
-- tiered-ratelimit: remove a cluster reservation again (src/store/redis/rollback.rs).
-- (allow-oom: it only removes, so it must run when Redis is over `maxmemory` too, as a bare
-- ZREM would.)
--
-- KEYS[1]  the tier's sorted set, where script.lua recorded the reservation
-- KEYS[2]  (may be left out) the reservation's marker, in KEYS[1]'s slot: set here, for ARGV[4]
--          ms, so that a second run of this rollback (fred may send a command again after a
--          failover or a slot move, once it ran) does nothing and takes no stand-in
-- ARGV[1]  the member it recorded
-- ARGV[2]  the reservation's cost (decimal)
-- ARGV[3]  the score it recorded it at (µs, decimal: script.lua's now, at which it records)
-- ARGV[4]  how long the marker lives (ms)
--
-- Reply: 1 when the member was removed by its name; 2 when a stand-in was (below); 0 when
-- nothing was removed; 3 when the marker says this rollback ran already.
--
-- By its name only while it still has the reservation's score: a key emptied (trimmed, or
-- deleted by a reset) starts its running totals again, so a totals name can come back on
-- another request's entry, at another time.
--
-- A concurrent check of the same key may have renamed the member before this runs, keeping
-- its score and cost: a plain key taking the totals form (unless that check's clock is behind:
-- then the score moves too), a totals key rebased. Then an entry of the key with the same score
-- and the same cost stands in for it, the newest such: the key's entries then have, as
-- (score, cost) pairs, exactly those of the requests admitted, so it never counts fewer units
-- than they hold. (A plain key counts exactly; a totals key counts from its oldest live entry
-- to its newest by running totals, so an entry removed from its middle is counted until the
-- entries before it leave: more for a while, never fewer. The newest stand-in leaves the
-- smallest such gap.)
--
-- An entry moved back from the future (a check whose clock is behind the reservation's) has a
-- new score: nothing stands in, nothing is removed, and the reservation counts until it leaves
-- the window (stricter, never looser). The same when none of the LOOK newest entries at that
-- score has the cost and one of the limiter's two forms.
--
-- What this cannot tell: an entry recorded at exactly the reservation's microsecond after the
-- reservation left that score (moved back, trimmed, or deleted by a reset) is taken for it,
-- by name or as a stand-in. That needs two records of one key in one microsecond. docs/REDIS.md
-- names it.
local LOOK = 1000
local key, member, at = KEYS[1], ARGV[1], ARGV[3]
if KEYS[2] and not redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[4]) then
  return 3
end
local score = redis.call('ZSCORE', key, member)
if score and tonumber(score) == tonumber(at) then
  redis.call('ZREM', key, member)
  return 1
end
local cost = tonumber(ARGV[2])
for _, m in ipairs(redis.call('ZREVRANGEBYSCORE', key, at, at, 'LIMIT', '0', LOOK)) do
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
