#!lua
-- (The first line declares the script's flags: none. So Redis treats it as a script that may
-- write, and refuses it whole, with an OOM error, when it is over `maxmemory`; a script without
-- it is checked only at its first write, here a trim, which Redis allows when full, and every
-- ZADD after it would then pass the cap. Needs Redis 7.0 or later.)
-- tiered-ratelimit: decide a batch of requests, each for all its tiers, atomically, in one
-- round trip.
--
-- A batch is one or more checks, decided one after the other, in order, exactly as if each
-- had been a script of its own (src/store/redis/batch.rs sends the checks that wait at the
-- same moment together). Check c takes its keys and arguments from where the check before it
-- ended:
--   ARGV  now (microseconds since the epoch; empty: Redis TIME, read once per batch), the
--         window (µs), the cost (units this request spends), n (its tiers) and b (its block
--         keys), each a single digit, then the limit of each tier (negative for a tier in
--         shadow mode: it never denies)
--   KEYS  the tiers' sorted sets, most specific first (user, endpoint, global), then the
--         block keys of the first b tiers (an operator's block: a string with an expiry)
-- A check after the first may instead be sent short, as a repeat of the last check sent whole
-- before it (most checks of a batch differ from the one before only in their time and user):
--   ARGV  now, then an empty string (where a whole check has its window, never empty)
--   KEYS  its first tier's key, then (when b > 0) its first block key
-- and it takes the window, cost, n, b, limits, later tiers' keys and later block keys of that
-- check. Redis then reads, and the script holds, 2 arguments and 1 or 2 keys for it instead
-- of 5 + n and n + b. (Every key a short check names is still in KEYS, once.)
-- The reply holds one reply per check, in order (below).
--
-- Each admitted request is ONE member, scored by its time, whatever its cost. A key holds
-- members of one of two forms:
--   plain   (a key that has only seen requests of cost 1 since it was last empty): the member
--           is its score in decimal, then '-k' (k = 1, 2, ...) if that name is taken. Every
--           member is one unit, so a key's count is ZCARD, and its oldest entry's time is the
--           oldest member's name: one cheap read each.
--   totals  "<total>:<cost>" (hex), where <total> is the key's running total of costs up to
--           and including it (16 digits, so that members of equal score sort in recording
--           order; strictly increasing, so members are unique). Members are recorded at
--           max(now, newest score), so rank order is recording order, and a key's count is
--             total(newest) - (total(oldest) - cost(oldest))
--           two O(log n) reads, whatever the costs.
-- The oldest member tells a key's form (a ':' at position 17). A key takes the totals form
-- when a request of cost > 1 is recorded in it: its plain members are rewritten once, in
-- rank order, as totals of one unit each; it keeps that form until it is empty again.
--
-- When a block key of the request exists, the check records nothing and answers
-- {2, now, '', j, ms}: j is the first blocked tier, ms the longest time left (PTTL) of the
-- request's blocks. In a batch, a check that meets a key of the wrong type, or a member the
-- script cannot read (one the limiter did not write), and the checks after it answer
-- {3, the error}, and the checks before it keep their answers; alone, a check fails with the
-- error. Either way it records nothing.
--
-- A check does only what must be atomic: trim, count, admit if every enforced tier has room,
-- record. It returns the facts, and src/algorithm.rs (the one copy of the decision) derives
-- the answer from them:
--   {admitted, now, member, count_1, oldest_1, expiry_1, ..., count_k, oldest_k, expiry_k}
-- admitted is 1 (recorded in every tier with room) or 0 (recorded nowhere: tier k is the first
-- enforced tier without room, and the facts stop there), or 4 when no tier was full (then
-- recorded in every tier, and each tier's facts are a pair, without the expiry: three
-- elements fewer for Redis to reply, on the path most checks take); now is the time the
-- check used;
-- member is what was recorded in the first recording tier ('' if none; a cluster's rollback
-- removes it); per tier: the units live in the window, the oldest entry's score (-1: none; a
-- plain key's oldest member name, a string of decimal digits, when that is its score), and the
-- score of the entry whose leaving makes room for this request (-1: none, or not needed).
--
-- In a batch of four checks or more, keys several checks share (the endpoint's, the
-- global one) are read once: the first check that meets such a key in the plain form reads its
-- oldest members (a prefix of the key) with its count, and the batch then keeps that picture in
-- step with every command it sends to the key, so that the next checks trim, count and find
-- the oldest entry in it, without a command; their members are held back and sent as one ZADD
-- per key, named as ZADD NX would name them one at a time. The trims the picture made are sent once,
-- as one ZREMRANGEBYSCORE at the highest cutoff, before any other command that reads the key
-- and at the end of the batch, with one PEXPIRE per shared key (Redis runs a script at one
-- frozen time, so one PEXPIRE at the end sets what one per admission would). Whatever the
-- picture cannot answer exactly (a full tier, a cost above 1, an entry from the future, a
-- prefix trimmed to its end, a member recorded out of order) is sent to Redis as the check of
-- its own would be, after the pending trim. So every check answers what it would answer alone.
--
-- Exactness: Lua numbers are doubles, exact for integers below 2^53. Scores are microseconds
-- (2^53 µs is the year 2255). Limits are at most 2^50 (the config's MAX_LIMIT), so the units
-- live in a window are too; running totals would grow without end over a key's life, so once
-- the next total would pass REBASE_AT (2^52) the key's members are rewritten with the totals
-- less the total already expired (at most 2^50 after that). Every number the script computes
-- then stays below 2^52 + 2 * 2^50 < 2^53. A rebase touches each live member once, and a
-- member is rewritten at most once in its life (the next rebase is 3 * 2^50 units later, and a
-- window holds at most 2^50). Numbers are formatted with %d (an exact integer conversion) or
-- %x: Lua's default number-to-string keeps only 14 digits.
--
-- Clocks: an entry scored after `now` (an app instance whose clock runs ahead, or a clock
-- stepped back) is moved back to `now` before it can shape an answer: in a totals key before
-- anything is counted (recording there needs the newest entry); in a plain key, whose count
-- does not depend on scores, when it is the oldest entry, when the tier is full, or when the
-- key takes the totals form. So no answer waits longer than a window (and 1 µs), and an
-- instance's clock error can shift entries by at most that error.
--
-- Cost: on the path most checks take (cost 1, plain keys, admitted) a tier is five commands
-- (ZREMRANGEBYSCORE, ZRANGE 0 0, ZCARD, ZADD, PEXPIRE) with no score read or formatted as a
-- float, and a shared key after its first check in a batch none of its own; see
-- docs/BENCHMARKS.md for what each piece costs.
local call, format, byte, sub, find, match =
  redis.call, string.format, string.byte, string.sub, string.find, string.match
local try, type = redis.pcall, type
local REBASE_AT = 4503599627370496 -- 2^52
-- The error of a check that met a member the limiter did not write in tier %d's key (an
-- operator's ZADD, say): it fails before it records anything, as a key of the wrong type does.
-- (A string, not a function: each function the script defines costs every run a closure.)
local UNREADABLE =
  'ERR tiered-ratelimit cannot read a member of the key of tier %d: written by something else?'
-- The check being decided (the cold paths read them).
local now, now_s

-- The paths few checks take (denials, clocks that disagree, costs, rebases), made on first
-- need: every function defined at the top level would be a new closure at every run.
local cold
local function cold_paths()
  local c = {}

  -- A totals member's running total and cost; nil for what the limiter did not write (no ':'
  -- at byte 17, not hex, a total a double cannot hold exactly, a cost outside 1 to 2^50, the
  -- config's MAX_LIMIT). (A pattern over the whole name would cost a costly request 11% more
  -- instructions: tonumber with a base, strtoul, reads the hex.)
  function c.total_of(member)
    if byte(member, 17) ~= 58 then return nil end
    local t = tonumber(sub(member, 1, 16), 16)
    return t and t < 9007199254740992 and t or nil
  end

  function c.cost_of(member)
    if byte(member, 17) ~= 58 then return nil end
    local k = tonumber(sub(member, 18), 16)
    return k and k >= 1 and k <= 1125899906842624 and k or nil
  end

  -- The time a plain member names (its digits before any '-k', k digits); nil for what the
  -- limiter did not write.
  function c.time_of(member)
    local t = match(member, '^%d+$') and member or match(member, '^(%d+)%-%d+$')
    return t and tonumber(t)
  end

  -- Records a plain member at now under the first free name from now-k on; returns it.
  -- (Taking k from the key's count makes the first try free in a burst at one instant.)
  function c.add_plain(key, k)
    local member = format('%s-%d', now_s, k)
    while call('ZADD', key, 'NX', now_s, member) == 0 do
      k = k + 1
      member = format('%s-%d', now_s, k)
    end
    return member
  end

  -- Moves the entries scored after now back to now; a plain member is renamed, since its
  -- name is its time (added under its new name before the old one goes, so that the key is
  -- never empty: an empty key is deleted, and made again without its expiry). Rank order
  -- stays recording order in a totals key: the moved entries are its newest, and equal scores
  -- sort by their running totals.
  function c.clamp(key, plain)
    for k, member in ipairs(call('ZRANGEBYSCORE', key, '(' .. now_s, '+inf')) do
      if plain then
        c.add_plain(key, k)
        call('ZREM', key, member)
      else
        call('ZADD', key, now_s, member)
      end
    end
  end

  -- Replaces the key's members (score, member pairs) in batches (unpack has a stack limit).
  function c.rewrite(key, pairs_)
    call('DEL', key)
    for j = 1, #pairs_, 1000 do
      call('ZADD', key, unpack(pairs_, j, math.min(j + 999, #pairs_)))
    end
  end

  -- A plain key takes the totals form: one unit per member, in rank order, none after now.
  -- Returns the newest total.
  function c.to_totals(key)
    local all = call('ZRANGE', key, '0', '-1', 'WITHSCORES')
    for j = 1, #all, 2 do
      if tonumber(all[j + 1]) > now then all[j + 1] = now_s end
      all[j], all[j + 1] = all[j + 1], format('%016x:1', (j + 1) / 2)
    end
    c.rewrite(key, all)
    return #all / 2
  end

  -- Rewrites a totals key's members with their running totals less `base` (what already
  -- expired).
  function c.rebase(key, base)
    local all = call('ZRANGE', key, '0', '-1', 'WITHSCORES')
    for j = 1, #all, 2 do
      local member = all[j]
      all[j] = all[j + 1]
      all[j + 1] = format('%016x:%x', c.total_of(member) - base, c.cost_of(member))
    end
    c.rewrite(key, all)
  end

  -- The score of the entry whose leaving frees `units` units (1 <= units <= count); nil when
  -- a member on the way is not the limiter's.
  function c.expiry(key, plain, base, units)
    local rank
    if plain then
      rank = units - 1
    else
      -- The first entry whose running total reaches base + units: binary search by rank.
      local lo, hi = 0, call('ZCARD', key) - 1
      while lo < hi do
        local mid = math.floor((lo + hi) / 2)
        local m = format('%d', mid)
        local total = c.total_of(call('ZRANGE', key, m, m)[1])
        if not total then return nil end
        if total >= base + units then
          hi = mid
        else
          lo = mid + 1
        end
      end
      rank = lo
    end
    rank = format('%d', rank)
    return tonumber(call('ZRANGE', key, rank, rank, 'WITHSCORES')[2])
  end

  return c
end

-- The batch's shared keys (see the header). Only a batch of four checks or more makes these
-- tables and closures: each made at a run costs Redis about a thousand instructions, with the
-- garbage collector's share, and a smaller batch decides each check as alone (with pictures,
-- a batch of 2 cost 202k instructions a check against 175k without; of 3, 190k against 181k).
-- A shared key (one several of the batch's checks name) has, in `shared`:
--   left   how many of the batch's checks have yet to reach it
--   ttl    the PEXPIRE of its last admission in the batch, sent at the batch's end
--   pic    its picture, or nil:
--     q        the key's oldest members, in order (a prefix of the key; all of it if whole),
--              each replaced by its time (decimal) when a check first reaches it, and the last
--              one from the start
--     ok       the last of q read as a time
--     h        the first of q still in the window (those before it were trimmed here)
--     n        the key's members in the window
--     whole    q holds every member of the key (then the members the batch records are added)
--     cut      the digits of the highest cutoff the picture trimmed at that Redis has not seen
--     at       now_s of the last member the batch recorded in the key
--     max      the time of the key's newest member when the picture was made ('' for none)
--     adds     the members held back: score, member, ...
--     used     the names held back at time used_at: false for none, true for the plain name
--              alone, else a table (true: the plain name; k: '-k')
--     fn, fc   now_s and cutoff of the last check whose answer the picture gave; nil once a
--              check reads it otherwise (the next check at both takes that answer as it is)
--     rn       now_s of the last member, when it was held back (the next member at rn or
--              later is held back without the tests it passed)
-- Times are compared as decimal strings, written out where they run (a function call costs
-- a Lua frame): d is below t when (#d == #t and d < t or #d < #t), since both are written
-- without leading zeros, so a shorter one is smaller and two of one length compare as
-- strings.
local shared, order, number, flush, picture, time_digits
-- Whether a check must ask for its own block keys (a batch asks for all of them at once).
local blocks = true
-- (A check's n and b are single digits: read as bytes, not by strtod.)
local replies
-- (Locals: a global is a table lookup at every use.)
local KEYS, ARGV = KEYS, ARGV
local nargs = #ARGV
if nargs > 5 + byte(ARGV[4]) - 48 then
  replies = {}
end
-- Whether the batch has four checks or more (each whole check has 5 + n arguments, each short
-- one 2).
local checks, a = 0, 1
while a <= nargs and checks < 4 do
  checks = checks + 1
  a = a + (ARGV[a + 1] == '' and 2 or 5 + byte(ARGV[a + 3]) - 48)
end
if checks >= 4 then
  shared, order = {}, {}
  -- The numbers of the batch's arguments, each read once (tonumber is glibc's strtod, and
  -- the batch's checks repeat their windows, costs and limits).
  local nums = {}
  number = function(s)
    local v = nums[s]
    if not v then
      v = tonumber(s)
      nums[s] = v
    end
    return v
  end

  -- Sends what the picture of `key` (`s`: its entry) holds back and its pending trim, and
  -- forgets the picture: Redis then holds what it showed, and the next check reads the key.
  flush = function(key, s)
    local pic = s.pic
    if pic then
      if #pic.adds > 0 then call('ZADD', key, unpack(pic.adds)) end
      if pic.cut then call('ZREMRANGEBYSCORE', key, '-inf', '(' .. pic.cut) end
      s.pic = nil
    end
  end

  -- The time a plain member's name gives, in the form times are compared in (its digits
  -- before any '-k', without leading zeros); nil for a name the limiter did not write. A
  -- picture reads each of its names when a check first reaches it (most are never reached:
  -- the picture reads about one for each check still to come), and no answer comes from a
  -- picture whose next name is not a time: the check reads the key itself.
  time_digits = function(member)
    local d = find(member, '-', 2, true)
    if d then
      if not find(member, '^%-%d+$', d) then return nil end
      member = sub(member, 1, d - 1)
    end
    if not find(member, '^%d+$') or (byte(member) == 48 and #member > 1) then return nil end
    return member
  end

  -- Starts the picture of shared plain key `key` from its oldest members `q` and its count
  -- (and reads its newest member, unless `q` is the whole key); none when the newest name is
  -- not a time.
  picture = function(key, s, q, count)
    local whole = #q >= count
    local max = ''
    if #q > 0 then
      max = time_digits(q[#q])
      if not max then return end
      q[#q] = max
    end
    if not whole then
      max = time_digits(call('ZRANGE', key, '-1', '-1')[1])
      if not max then return end
    end
    s.pic = {q = q, h = 1, ok = 0, n = count, whole = whole, max = max, adds = {}}
  end

  -- Which keys several checks name, and the batch's block keys: one EXISTS for them all,
  -- each named once. A short check names its first tier's key and first block key; its later
  -- ones are the last whole check's (whose keys come after hk), counted once for all its
  -- repeats (r) when the next whole check, or the end, comes.
  local k, hk, n, b, r, uses, keys, seen = 0, 0, 0, 0, 0, {}, {}, {}
  a = 1
  while true do
    local short = a <= nargs and ARGV[a + 1] == ''
    if short then
      r = r + 1
      local key = KEYS[k + 1]
      local u = (uses[key] or 0) + 1
      uses[key] = u
      if u == 2 then order[#order + 1] = key end
      if b > 0 then
        key = KEYS[k + 2]
        if not seen[key] then
          seen[key] = true
          keys[#keys + 1] = key
        end
        k = k + 2
      else
        k = k + 1
      end
      a = a + 2
    else
      if r > 0 then
        for i = 2, n do
          local key = KEYS[hk + i]
          local u = uses[key]
          if u < 2 then order[#order + 1] = key end
          uses[key] = u + r
        end
        r = 0
      end
      if a > nargs then break end
      hk, n, b = k, byte(ARGV[a + 3]) - 48, byte(ARGV[a + 4]) - 48
      for i = 1, n do
        local key = KEYS[k + i]
        local u = (uses[key] or 0) + 1
        uses[key] = u
        if u == 2 then order[#order + 1] = key end
      end
      for i = 1, b do
        local key = KEYS[k + n + i]
        if not seen[key] then
          seen[key] = true
          keys[#keys + 1] = key
        end
      end
      k, a = k + n + b, a + 5 + n
    end
  end
  for _, key in ipairs(order) do shared[key] = {left = uses[key]} end
  blocks = #keys > 0 and call('EXISTS', unpack(keys)) > 0
else
  number = tonumber
end
-- Redis TIME, read once per batch when a check asks for it; its decimal.
local clock, clock_s
-- Per tier, for the recording pass: false (a full shadow tier: not recorded), the count (a
-- plain or empty key, recorded as plain for a cost of 1; negated when an entry at now is
-- likely), or the newest entry {member, score} of a totals key ({} for a key to be made a
-- totals key, {plain = true} for a plain key to become one).
local how = {false, false, false}
local k = 0
a = 1
local reply
-- The last check sent whole: the keys before its own, its tiers and block keys, window, cost
-- and limits (a short check repeats them).
local hk, n, b, window, cost = 0
local limits = {0, 0, 0} -- (sized for three tiers: a table that grows reallocates)
-- The last check's cutoff (for its now and window) and expiry (for its window).
local cut_now, cut_window, cutoff, cut_s, ttl_window, ttl
-- The error a check of a batch met (then it and the checks after it answer {3, failed}).
local failed
while a <= nargs do
  local short = ARGV[a + 1] == ''
  if not short then
    hk = k
    n, b = byte(ARGV[a + 3]) - 48, byte(ARGV[a + 4]) - 48
    window, cost = number(ARGV[a + 1]), number(ARGV[a + 2])
    for i = 1, n do limits[i] = number(ARGV[a + 4 + i]) end
  end
  -- Where this check's keys are: its first tier's at k + 1, the later tiers' after kt, its
  -- first block key at b1, the later ones after kb.
  local kt, b1, kb = hk, short and k + 2 or k + n + 1, hk + n
  repeat
    if ARGV[a] == '' then
      if not clock then
        if redis.replicate_commands then redis.replicate_commands() end
        local t = call('TIME')
        clock = t[1] * 1000000 + t[2]
        clock_s = format('%d', clock)
      end
      now, now_s = clock, clock_s
    else
      -- The client sends an integer in decimal (src/store/redis/script.rs).
      now, now_s = tonumber(ARGV[a]), ARGV[a]
    end
    -- The cutoff, its digits (for the pictures; none within the epoch's first window) and the
    -- expiry, formatted once for the batch's checks of one time and window (a format is
    -- glibc's printf: about a thousand instructions).
    if now ~= cut_now or window ~= cut_window then
      cut_now, cut_window = now, window
      cutoff = format('(%d', now - window)
      cut_s = shared and now >= window and sub(cutoff, 2) or nil
    end
    if window ~= ttl_window then
      ttl_window, ttl = window, format('%d', math.ceil(window / 1000) + 1)
    end

    -- Blocks: one EXISTS over the request's block keys when it has any; PTTL only when one is
    -- set.
    if b > 0 and blocks and call('EXISTS', KEYS[b1], unpack(KEYS, kb + 2, kb + b)) > 0 then
      local first, longest = 0, 0
      for i = 1, b do
        local ms = call('PTTL', KEYS[i == 1 and b1 or kb + i])
        if ms > 0 then
          if first == 0 then first = i end
          if ms > longest then longest = ms end
        end
      end
      if first > 0 then
        reply = {2, now, '', first, longest}
        break
      end
    end

    -- In pairs (count, oldest) while no tier is full, then in triples (and its expiry).
    reply = {4, now, '', 0, 0, 0, 0, 0, 0}
    local w = 2
    for i = 1, n do
      local key = KEYS[i == 1 and k + 1 or kt + i]
      local limit = limits[i]
      local shadow = limit < 0
      if shadow then limit = -limit end
      local count, oldest, expiry, base = 0, -1, -1, 0
      local kind, ahead
      local sk = shared and shared[key]
      if sk then
        ahead = sk.left
        sk.left = ahead - 1
        local pic = sk.pic
        if pic then
          -- The batch's picture answers if it can (cost 1, the oldest entry known and not
          -- from the future, room left), else Redis does.
          local c, o, taken
          if cost == 1 and pic.fn == now_s and pic.fc == cutoff then
            -- As the last check that read the picture at this time and cutoff found it (no
            -- check read it since): the trim below would stop where it stopped.
            c, o, taken = pic.n, pic.q[pic.h], pic.at == now_s
          elseif cost == 1 then
            pic.fn = nil
            local q, h = pic.q, pic.h
            -- Trims the picture, reading each name it reaches (ok: the last one read).
            while h <= #q do
              if h > pic.ok then
                local t = time_digits(q[h])
                if not t then break end
                q[h], pic.ok = t, h
              end
              -- (Stops unless d is below cut_s.)
              local d = q[h]
              if not cut_s or #d > #cut_s or #d == #cut_s and d >= cut_s then break end
              h = h + 1
            end
            if h > pic.h then
              pic.n, pic.cut = pic.n - (h - pic.h), cut_s
              pic.h = h
            end
            if h > pic.ok and h <= #q then
              -- a name the limiter did not write: Redis answers
            elseif pic.n == 0 then
              c, o = 0, -1
            elseif h <= #q and not (#now_s == #q[h] and now_s < q[h] or #now_s < #q[h]) then
              c, o, taken = pic.n, q[h], pic.at == now_s
              pic.fn, pic.fc = now_s, cutoff
            end
          end
          if c and c + 1 <= limit then
            count, oldest = c, o
            kind = (taken or o == now_s) and -c or c
          else
            flush(key, sk)
          end
        end
      end
      if not kind then
        -- (The first command of a check on a key: a key of the wrong type, an operator's SET
        -- say, fails here, before the check has recorded anything. Alone, the check fails
        -- with Redis's error; in a batch, the checks before it keep their answers, and what
        -- the pictures held back for them is sent at the batch's end.)
        local trimmed = try('ZREMRANGEBYSCORE', key, '-inf', cutoff)
        if type(trimmed) == 'table' then
          failed = trimmed.err
          break
        end
        -- A costly request will want the score (a totals key's oldest entry does not name it).
        -- A key more checks of the batch will reach reads its oldest members for the picture.
        -- (Every member read costs Redis a Lua string: a picture reads about one for each
        -- check still to come, and needs no ZCARD when that is the whole key.)
        local first, want
        if cost > 1 then
          first = call('ZRANGE', key, '0', '0', 'WITHSCORES')
        elseif ahead and ahead > 1 then
          want = math.min(ahead + 3, 67)
          first = call('ZRANGE', key, '0', format('%d', want - 1))
        else
          first = call('ZRANGE', key, '0', '0')
        end
        local m = first[1]
        kind = 0
        if m == nil then
          if cost > 1 then kind = {} end
        elseif byte(m, 17) ~= 58 then
          -- plain
          count = want and #first < want and #first or call('ZCARD', key)
          -- The member names the oldest entry's time: it is replied as it is (the client reads
          -- the digits; no float is parsed here) unless it holds a '-k' suffix or may be after
          -- now (longer, or as long and above it: decimal integers of one length compare as
          -- strings).
          oldest = m
          if find(m, '-', 2, true) or #m ~= #now_s or m > now_s then
            cold = cold or cold_paths()
            oldest = cold.time_of(m)
            if not oldest then
              failed = format(UNREADABLE, i)
              break
            end
            if oldest > now then
              cold.clamp(key, true)
              oldest = now
              first = nil
            end
          end
          if cost > 1 then
            kind = {plain = true}
          elseif oldest == now_s or oldest == now then
            kind = -count
          else
            kind = count
          end
        else
          -- totals
          cold = cold or cold_paths()
          oldest = tonumber(cost > 1 and first[2] or call('ZRANGE', key, '0', '0', 'WITHSCORES')[2])
          kind = call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
          local first_total, first_cost, last_total =
            cold.total_of(m), cold.cost_of(m), cold.total_of(kind[1])
          -- (Running totals rise with rank: a newest total below the oldest's is not ours.
          -- A rebase on the way rewrites every member: each must be the limiter's.)
          local ours = first_total and first_cost and last_total and last_total >= first_total
          if ours and last_total + cost > REBASE_AT then
            for _, member in ipairs(call('ZRANGE', key, '0', '-1')) do
              if not (cold.total_of(member) and cold.cost_of(member)) then ours = false end
            end
          end
          if not ours then
            failed = format(UNREADABLE, i)
            break
          end
          if tonumber(kind[2]) > now then
            cold.clamp(key, false)
            kind[2] = now_s
            if oldest > now then oldest = now end
          end
          base = first_total - first_cost
          count = last_total - base
        end
        -- A plain key more checks will reach, with room, starts the batch's picture of it.
        if first and ahead and ahead > 1 and type(kind) == 'number' and count + 1 <= limit then
          picture(key, sk, first, count)
        end
      end
      local full = count + cost > limit
      if full and cost <= limit then
        cold = cold or cold_paths()
        local plain = type(kind) == 'number' or kind.plain
        if plain then cold.clamp(key, true) end
        expiry = cold.expiry(key, plain, base, count + cost - limit)
        if not expiry then
          failed = format(UNREADABLE, i)
          break
        end
      end
      if full and w == 2 then
        -- The tiers before this one go from pairs to triples (from the last, so that none is
        -- overwritten before it moves).
        for j = i - 1, 1, -1 do
          local c, o = reply[2 * j + 2], reply[2 * j + 3]
          reply[3 * j + 1], reply[3 * j + 2], reply[3 * j + 3] = c, o, -1
        end
        reply[1], w = 1, 3
      end
      local r = w * i + 3 - w
      reply[r + 1] = count
      reply[r + 2] = oldest
      if w == 3 then reply[r + 3] = expiry end
      if full then
        if not shadow then
          reply[1] = 0
          reply[r + 4] = nil
          break
        end
        kind = false
      end
      how[i] = kind
    end
    if failed or reply[1] == 0 then break end
    reply[w * n + 4] = nil

    for i = 1, n do
      local key = KEYS[i == 1 and k + 1 or kt + i]
      local kind = how[i]
      if kind then
        local member, held, sure
        local sk = shared and shared[key]
        local pic = sk and sk.pic
        if type(kind) == 'number' then
          -- plain, cost 1
          local cut, rn = pic and pic.cut, pic and pic.rn
          if cut and (#now_s == #cut and now_s < cut or #now_s < #cut) then
            -- Before a trim the picture has not sent (a clock more than a window behind).
            flush(key, sk)
            pic = nil
          elseif rn == now_s then
            -- The last member recorded in the key was held back at this time, and the tests
            -- below would pass as they did for it (rn: see the shared key's part below).
            held, sure = true, true
          elseif rn and (#rn == #now_s and rn < now_s or #rn < #now_s) then
            -- Or at an earlier time (the app's clock: each check its own microsecond): the
            -- tests below pass as they did for it (the key's newest member before it was
            -- made, nothing held back after it), and this time is new.
            pic.used, pic.used_at = false, now_s
            held, sure = true, true
          else
            local max = pic and pic.max
            if max and (#max == #now_s and max < now_s or #max < #now_s) then
              -- Held back and named as ZADD NX would, one member at a time: the plain name if
              -- free, else '-k' from k = |kind| on. That needs every name at now to be the
              -- batch's: so only when the key had nothing at now or later when the picture
              -- was made (max), and no member was held back at a later time (used_at only
              -- grows; a member recorded in Redis instead is at or below max, or below
              -- used_at).
              -- (used: false while nothing is taken at used_at, true for the plain name alone,
              -- else a table of the names taken: most times take one name, and no table.)
              local at = pic.used_at
              if at ~= now_s and not (at and (#now_s == #at and now_s < at or #now_s < #at)) then
                pic.used, pic.used_at = false, now_s
              end
              held = pic.used_at == now_s
            end
          end
          if held then
            local used = pic.used
            if kind >= 0 and (not used or used ~= true and not used[true]) then
              if used then used[true] = true else pic.used = true end
              member = now_s
            else
              if not used or used == true then
                used = {[true] = used or nil}
                pic.used = used
              end
              local j = kind < 0 and -kind or kind
              while used[j] do j = j + 1 end
              used[j] = true
              member = format('%s-%d', now_s, j)
            end
            local adds = pic.adds
            adds[#adds + 1] = now_s
            adds[#adds + 1] = member
          end
          if member then
            -- held back by the picture
          else
            if pic and #pic.adds > 0 then
              call('ZADD', key, unpack(pic.adds))
              pic.adds = {}
            end
            if kind >= 0 and call('ZADD', key, 'NX', now_s, now_s) == 1 then
              member = now_s
            else
              cold = cold or cold_paths()
              member = cold.add_plain(key, math.abs(kind))
            end
          end
        else
          if sk then flush(key, sk) end
          cold = cold or cold_paths()
          local total, at = cost, now
          if kind.plain then
            total = cold.to_totals(key) + cost
          elseif kind[1] then
            total = cold.total_of(kind[1]) + cost
            at = math.max(now, tonumber(kind[2]))
          end
          if total > REBASE_AT then
            local oldest = call('ZRANGE', key, '0', '0')[1]
            local base = cold.total_of(oldest) - cold.cost_of(oldest)
            cold.rebase(key, base)
            total = total - base
          end
          member = format('%016x:%x', total, cost)
          call('ZADD', key, format('%d', at), member)
        end
        if sk then
          -- A shared key: its expiry at the batch's end, its picture in step with the member
          -- just recorded at now (unless out of order: a clock behind).
          sk.ttl = ttl
          pic = sk.pic
          if pic then
            local q = pic.q
            local last = q[#q]
            if not sure and pic.h <= #q
              and (#now_s == #last and now_s < last or #now_s < #last) then
              flush(key, sk)
            else
              if pic.whole then q[#q + 1] = now_s end
              -- rn: this member was held back at now, after the tests above and the one here
              -- found the picture as they will find it for the next member at now or later:
              -- the newest member the picture knows is rn's, the key's newest before the
              -- picture is older, no name is held back after rn; until a member is recorded
              -- otherwise (here). (A trim since then is tested above, where it may flush.)
              pic.n, pic.at, pic.rn = pic.n + 1, now_s, held and now_s or nil
            end
          end
        else
          call('PEXPIRE', key, ttl)
        end
        if reply[3] == '' then reply[3] = member end
      end
    end
  until true
  if failed then break end
  if replies then replies[#replies + 1] = reply end
  if short then
    k, a = k + (b > 0 and 2 or 1), a + 2
  else
    k, a = k + n + b, a + 5 + n
  end
end
if failed then
  if not replies then return {err = failed} end
  while a <= nargs do
    replies[#replies + 1] = {3, failed}
    a = a + (ARGV[a + 1] == '' and 2 or 5 + byte(ARGV[a + 3]) - 48)
  end
end
-- The batch's end: what the pictures hold back and trimmed, then the shared keys' expiry.
if shared then
  for _, key in ipairs(order) do
    local sk = shared[key]
    flush(key, sk)
    if sk.ttl then call('PEXPIRE', key, sk.ttl) end
  end
end
return replies or reply
