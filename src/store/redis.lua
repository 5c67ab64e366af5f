-- tiered-ratelimit: decide one request for all its tiers, atomically, in one round trip.
--
-- KEYS[i]     the tiers' sorted sets, most specific first (user, endpoint, global)
-- ARGV[1]     now, in microseconds since the epoch; empty: read Redis TIME
-- ARGV[2]     the window, in microseconds
-- ARGV[3]     the cost (entries to record)
-- ARGV[4]     a member unique to this request (suffixed with :k for k > 1 when cost > 1)
-- ARGV[4+i]   the limit of KEYS[i]; negative for a tier in shadow mode (it never denies)
--
-- Returns {1, remaining, s, s_retry_us, b, b_reset_us} when admitted: recorded in every tier
-- with room; s is the first shadow tier that was full (0 if none; it does not record the
-- request); b is the tier with the least remaining and b_reset_us the time until its oldest
-- entry leaves the window. Or
-- {0, i, retry_after_us} when KEYS[i] is the first enforced tier without room (recorded
-- nowhere).
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
local member = ARGV[4]
local cutoff = string.format('(%.0f', now - window)
local remaining = -1
local shadow_tier, shadow_retry = 0, 0
local bind = 1
local record = {}

for i, key in ipairs(KEYS) do
  local limit = tonumber(ARGV[4 + i])
  local shadow = limit < 0
  if shadow then limit = -limit end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', cutoff)
  local count = redis.call('ZCARD', key)
  if count + cost > limit then
    local retry = window
    if cost <= limit then
      local idx = count + cost - limit - 1
      local entry = redis.call('ZRANGE', key, idx, idx, 'WITHSCORES')
      retry = tonumber(entry[2]) + window + 1 - now
    end
    if retry < 1 then retry = 1 end
    if not shadow then
      return {0, i, retry}
    end
    if shadow_tier == 0 then shadow_tier, shadow_retry = i, retry end
    if remaining ~= 0 then remaining, bind = 0, i end
  else
    record[#record + 1] = key
    local left = limit - count - cost
    if remaining < 0 or left < remaining then remaining, bind = left, i end
  end
end

local score = string.format('%.0f', now)
local ttl = string.format('%.0f', math.ceil(window / 1000) + 1)
for _, key in ipairs(record) do
  if cost == 1 then
    redis.call('ZADD', key, score, member)
  else
    for k = 1, cost do
      redis.call('ZADD', key, score, member .. ':' .. k)
    end
  end
  redis.call('PEXPIRE', key, ttl)
end
local reset = shadow_retry
if bind ~= shadow_tier then
  local oldest = redis.call('ZRANGE', KEYS[bind], 0, 0, 'WITHSCORES')
  reset = tonumber(oldest[2]) + window + 1 - now
end
return {1, remaining, shadow_tier, shadow_retry, bind, reset}
