-- tiered-ratelimit: what each tier's key holds now, READ ONLY (no trim, no record, no expiry).
--
-- KEYS[i]     the tiers' sorted sets (as script.lua takes them)
-- ARGV[1]     now, in microseconds since the epoch; empty: read Redis TIME
-- ARGV[2]     the window, in microseconds
--
-- Reply: {now, used_1, oldest_1, ..., used_k, oldest_k}: per key, the units live in the window
-- (an entry scored at exactly now - window still counts) and the oldest live entry's score
-- (-1: none). An entry scored after now counts as recorded at now, as script.lua would count it.
--
-- Members are script.lua's, in either of its forms (any member of a key tells which: a ':' at
-- position 17 is the totals form):
--   totals  "<running total>:<cost>" (hex, the total 16 digits): the units live are
--           total(newest) - (total(oldest live) - cost(oldest live));
--   plain   one unit each (a key that has only seen requests of cost 1): the units live are
--           the members scored in the window.
--
-- Only ZRANGEBYSCORE, ZRANGE, ZCOUNT and TIME: the script cannot change a key, and reads a missing
-- key as empty without creating it.
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[1])
end
local from = string.format('%.0f', now - tonumber(ARGV[2]))

local function total_of(member)
  return tonumber(string.sub(member, 1, 16), 16)
end

local function cost_of(member)
  return tonumber(string.sub(member, 18), 16)
end

local reply = {now}
for _, key in ipairs(KEYS) do
  local used, oldest = 0, -1
  local first = redis.call('ZRANGEBYSCORE', key, from, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if first[1] then
    if string.byte(first[1], 17) == 58 then -- ':'
      local last = redis.call('ZRANGE', key, -1, -1)
      used = total_of(last[1]) - (total_of(first[1]) - cost_of(first[1]))
    else
      used = redis.call('ZCOUNT', key, from, '+inf')
    end
    oldest = math.min(tonumber(first[2]), now)
  end
  reply[#reply + 1] = used
  reply[#reply + 1] = oldest
end
return reply
