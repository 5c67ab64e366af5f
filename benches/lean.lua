-- The baseline of benches/redis.sh: the leanest three-tier sliding-log script, for comparison
-- only (the limiter never runs it). Per tier: ZREMRANGEBYSCORE, ZCARD; deny on the first full
-- tier; else ZADD + PEXPIRE in every tier. It returns no facts (no reset, no wait), knows no
-- costs, no shadow tiers, no clamp of future entries, and its members are the time in µs
-- (unique on one Redis, where two scripts never run in the same microsecond).
--
-- Same arguments as src/store/redis/script.lua: KEYS the tiers' sorted sets; ARGV[1] now in
-- µs (empty: Redis TIME), ARGV[2] the window in µs, ARGV[3] the cost (ignored: 1), ARGV[3+i]
-- the limit of KEYS[i]. Returns 1 (recorded in every tier) or 0 (recorded nowhere).
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
else
  now = tonumber(ARGV[1])
end
local at = string.format('%.0f', now)
local cutoff = string.format('(%.0f', now - ARGV[2])
for i, key in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', cutoff)
  if redis.call('ZCARD', key) + 1 > tonumber(ARGV[3 + i]) then return 0 end
end
local ttl = string.format('%.0f', math.ceil(ARGV[2] / 1000) + 1)
for _, key in ipairs(KEYS) do
  redis.call('ZADD', key, at, at)
  redis.call('PEXPIRE', key, ttl)
end
return 1
