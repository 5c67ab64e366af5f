-- tiered-ratelimit: decide one request for all its tiers, atomically, in one round trip.
--
-- KEYS[i]     the tiers' sorted sets, most specific first (user, endpoint, global)
-- ARGV[1]     now, in microseconds since the epoch; empty: read Redis TIME
-- ARGV[2]     the window, in microseconds
-- ARGV[3]     the cost (units this request spends)
-- ARGV[3+i]   the limit of KEYS[i]; negative for a tier in shadow mode (it never denies)
--
-- Each admitted request is ONE member, whatever its cost: "<total>:<cost>" (hex), where <total>
-- is the key's running total of costs up to and including it (16 digits, so that members of
-- equal score sort in recording order; strictly increasing, so members are unique), scored by
-- its time. Members are recorded at
-- max(now, newest score), so rank order is recording order. Then a key's count is
--   total(newest) - (total(oldest) - cost(oldest))
-- two O(log n) reads, whatever the costs; only a denial searches (binary, by rank) for the
-- entry whose expiry makes room.
--
-- The script does only what must be atomic: trim, count, admit if every enforced tier has
-- room, record. It returns the facts, and src/algorithm.rs (the one copy of the decision)
-- derives the answer from them:
--   {admitted, now, member, count_1, oldest_1, expiry_1, ..., count_k, oldest_k, expiry_k}
-- admitted is 1 (recorded in every tier with room) or 0 (recorded nowhere: tier k is the first
-- enforced tier without room, and the facts stop there); now is the time the script used;
-- member is what was recorded in the first recording tier ('' if none; a cluster's rollback
-- removes it); per tier: the units live in the window, the oldest entry's score, and the score
-- of the entry whose leaving makes room for this request (-1: none, or not needed).
--
-- Exactness: Lua numbers are doubles, exact for integers below 2^53. Scores are microseconds
-- (2^53 µs is the year 2255). Limits are at most 2^50 (the config's MAX_LIMIT), so the units
-- live in a window are too; running totals would grow without end over a key's life, so once
-- the next total would pass REBASE_AT (2^52) the key's members are rewritten with the totals
-- less the total already expired (at most 2^50 after that). Every number the script computes
-- then stays below 2^52 + 2 * 2^50 < 2^53. A rebase touches each live member once, and a
-- member is rewritten at most once in its life (the next rebase is 3 * 2^50 units later, and a
-- window holds at most 2^50). Numbers are formatted with %.0f: Lua's default number-to-string
-- keeps only 14 digits.
--
-- Clocks: an entry scored after `now` (an app instance whose clock runs ahead, or a clock
-- stepped back) is moved back to `now` before anything is counted: so no answer waits longer
-- than a window (and 1 µs), and an instance's clock error can shift entries by at most that
-- error.
local now
if ARGV[1] == '' then
  if redis.replicate_commands then redis.replicate_commands() end
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[1])
end
local window = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local now_s = string.format('%.0f', now)
local cutoff = string.format('(%.0f', now - window)

local function total_of(member)
  return tonumber(string.sub(member, 1, 16), 16)
end

local function cost_of(member)
  return tonumber(string.sub(member, 18), 16)
end

local REBASE_AT = 4503599627370496 -- 2^52

-- Rewrites every member of `key` with its running total less `base` (what already expired).
local function rebase(key, base)
  local all = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
  redis.call('DEL', key)
  for j = 1, #all, 2 do
    local member = all[j]
    redis.call('ZADD', key, all[j + 1],
      string.format('%016x:%x', total_of(member) - base, cost_of(member)))
  end
end

-- Moves every entry scored after `now` back to `now` (rank order stays recording order: they
-- are the newest entries, and equal scores sort by their running totals).
local function clamp_future(key, now_s)
  local future = redis.call('ZRANGEBYSCORE', key, '(' .. now_s, '+inf')
  for _, member in ipairs(future) do
    redis.call('ZADD', key, now_s, member)
  end
end

-- Per tier checked, in order: its count, its oldest entry's score, and (only for a tier that
-- cannot take the request, when the cost fits its limit at all) the score of the entry whose
-- leaving makes room; -1 for none. The rest of the decision (remaining, binding tier, waits)
-- is the Rust algorithm's, from these facts.
local facts = {}
local record = {}
local newest = {}

for i, key in ipairs(KEYS) do
  local limit = tonumber(ARGV[3 + i])
  local shadow = limit < 0
  if shadow then limit = -limit end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', cutoff)
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  local count, base, last, oldest, expiry = 0, 0, nil, -1, -1
  if first[1] then
    last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    if tonumber(last[2]) > now then
      clamp_future(key, now_s)
      last[2] = now_s
      if tonumber(first[2]) > now then first[2] = now_s end
    end
    base = total_of(first[1]) - cost_of(first[1])
    count = total_of(last[1]) - base
    oldest = tonumber(first[2])
  end
  local full = count + cost > limit
  if full and cost <= limit then
    -- The first entry whose running total reaches base + (units that must expire).
    local target = base + count + cost - limit
    local lo, hi = 0, redis.call('ZCARD', key) - 1
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if total_of(redis.call('ZRANGE', key, mid, mid)[1]) >= target then
        hi = mid
      else
        lo = mid + 1
      end
    end
    expiry = tonumber(redis.call('ZRANGE', key, lo, lo, 'WITHSCORES')[2])
  end
  facts[#facts + 1] = count
  facts[#facts + 1] = oldest
  facts[#facts + 1] = expiry
  if full and not shadow then
    local reply = {0, now, ''}
    for _, f in ipairs(facts) do reply[#reply + 1] = f end
    return reply
  end
  if not full then
    record[#record + 1] = i
    newest[i] = last
  end
end

local ttl = string.format('%.0f', math.ceil(window / 1000) + 1)
local recorded = ''
for _, i in ipairs(record) do
  local key, last = KEYS[i], newest[i]
  local total, at = cost, now
  if last then
    total = total_of(last[1]) + cost
    if total > REBASE_AT then
      local first = redis.call('ZRANGE', key, 0, 0)[1]
      local base = total_of(first) - cost_of(first)
      rebase(key, base)
      total = total - base
    end
    at = math.max(now, tonumber(last[2]))
  end
  local member = string.format('%016x:%x', total, cost)
  redis.call('ZADD', key, string.format('%.0f', at), member)
  redis.call('PEXPIRE', key, ttl)
  if recorded == '' then recorded = member end
end
local reply = {1, now, recorded}
for _, f in ipairs(facts) do reply[#reply + 1] = f end
return reply
