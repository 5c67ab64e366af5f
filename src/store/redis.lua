-- tiered-ratelimit: decide one request for all its tiers, atomically, in one round trip.
--
-- KEYS[i]     the tiers' sorted sets, most specific first (user, endpoint, global)
-- ARGV[1]     now, in microseconds since the epoch; empty: read Redis TIME
-- ARGV[2]     the window, in microseconds
-- ARGV[3]     the cost (units this request spends)
-- ARGV[4]     the request's id (not stored: the running total makes every member unique)
-- ARGV[4+i]   the limit of KEYS[i]; negative for a tier in shadow mode (it never denies)
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
-- Returns {1, remaining, s, s_retry_us, b, b_reset_us, member} when admitted: recorded in
-- every tier with room; s is the first shadow tier that was full (0 if none; it does not
-- record the request); b is the tier with the least remaining and b_reset_us the time until
-- its oldest entry leaves the window; member is what was recorded in the first recording tier
-- (for a cluster's rollback). Or {0, i, retry_after_us} when KEYS[i] is the first enforced
-- tier without room (recorded nowhere).
--
-- Scores are microseconds, exact as doubles up to 2^53. Numbers are formatted with %.0f:
-- Lua's default number-to-string keeps only 14 digits.
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
local cutoff = string.format('(%.0f', now - window)

local function total_of(member)
  return tonumber(string.sub(member, 1, 16), 16)
end

local function cost_of(member)
  return tonumber(string.sub(member, 18), 16)
end

local remaining = -1
local shadow_tier, shadow_retry = 0, 0
local bind = 1
local record = {}
local newest = {}
local oldest_at = {}

for i, key in ipairs(KEYS) do
  local limit = tonumber(ARGV[4 + i])
  local shadow = limit < 0
  if shadow then limit = -limit end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', cutoff)
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  local count, base, last = 0, 0, nil
  if first[1] then
    last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    base = total_of(first[1]) - cost_of(first[1])
    count = total_of(last[1]) - base
    oldest_at[i] = tonumber(first[2])
  end
  if count + cost > limit then
    local retry = window
    if cost <= limit then
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
      local entry = redis.call('ZRANGE', key, lo, lo, 'WITHSCORES')
      retry = tonumber(entry[2]) + window + 1 - now
    end
    if retry < 1 then retry = 1 end
    if not shadow then
      return {0, i, retry}
    end
    if shadow_tier == 0 then shadow_tier, shadow_retry = i, retry end
    if remaining ~= 0 then remaining, bind = 0, i end
  else
    record[#record + 1] = i
    newest[i] = last
    local left = limit - count - cost
    if remaining < 0 or left < remaining then remaining, bind = left, i end
  end
end

local ttl = string.format('%.0f', math.ceil(window / 1000) + 1)
local recorded = ''
for _, i in ipairs(record) do
  local key, last = KEYS[i], newest[i]
  local total, at = cost, now
  if last then
    total = total_of(last[1]) + cost
    at = math.max(now, tonumber(last[2]))
  end
  local member = string.format('%016x:%x', total, cost)
  redis.call('ZADD', key, string.format('%.0f', at), member)
  redis.call('PEXPIRE', key, ttl)
  if not oldest_at[i] then oldest_at[i] = at end
  if recorded == '' then recorded = member end
end
local reset = shadow_retry
if bind ~= shadow_tier then
  reset = oldest_at[bind] + window + 1 - now
end
return {1, remaining, shadow_tier, shadow_retry, bind, reset, recorded}
