-- The Lua bytecodes the limiter's script runs per check, line by line: run by
-- benches/script_profile.sh (which starts the Redis it talks to). The script runs in a
-- standalone Lua 5.1 (the language Redis embeds), its redis.call sent to a real redis-server
-- over luasocket, so that it takes the paths it takes in Redis; a count hook then counts every
-- bytecode the script executes, by line. Callgrind counts what Redis executes in all
-- (benches/redis_callgrind.sh); this says which lines of the script it executes for.
--
-- lua5.1 benches/script_profile.lua PORT SCRIPT BATCH USERS WARM PROFILED TOP TIME
-- Batches of BATCH checks as the limiter sends them under load (the first whole, the rest
-- short; three tiers and two block keys; limits 2^40; users drawn from USERS): WARM batches
-- untimed, then PROFILED batches counted. TIME: redis (each check sends an empty now: Redis
-- TIME, one time for the whole batch, the library's default) or app (each check its own
-- time, 5 to 30 µs after the one before, as an app stamps checks gathered over a round trip).
local socket = require('socket')
local port, script_path = tonumber(arg[1]), arg[2]
local batch, users = tonumber(arg[3]), tonumber(arg[4])
local warm, profiled, top = tonumber(arg[5]), tonumber(arg[6]), tonumber(arg[7])
local app = arg[8] == 'app'
local conn = assert(socket.connect('127.0.0.1', port))
conn:setoption('tcp-nodelay', true)

local function send(args)
  local parts = {'*' .. #args .. '\r\n'}
  for _, a in ipairs(args) do
    a = tostring(a)
    parts[#parts + 1] = '$' .. #a .. '\r\n' .. a .. '\r\n'
  end
  assert(conn:send(table.concat(parts)))
end

-- A reply as redis.call gives it to a script: integers as numbers, a nil bulk as false,
-- status and error replies as {ok = ...} and {err = ...}.
local function read()
  local line = assert(conn:receive('*l'))
  local t, rest = line:sub(1, 1), line:sub(2)
  if t == ':' then return tonumber(rest) end
  if t == '+' then return {ok = rest} end
  if t == '-' then return {err = rest} end
  local n = tonumber(rest)
  if n < 0 then return false end
  if t == '$' then return assert(conn:receive(n + 2)):sub(1, n) end
  local r = {}
  for i = 1, n do r[i] = read() end
  return r
end

local hook, counting
local function command(...)
  debug.sethook()
  send({...})
  local r = read()
  if counting then debug.sethook(hook, '', 1) end
  return r
end
redis = {
  call = function(...)
    local r = command(...)
    if type(r) == 'table' and r.err then error(r.err) end
    return r
  end,
  pcall = command,
  replicate_commands = function() return true end,
}

-- (Its first line, '#!lua', is Redis's; Lua reads it as a comment here.)
local source = io.open(script_path):read('*a'):gsub('^#![^\n]*', '--')
local chunk = assert(loadstring(source, '=script'))
local counts = {}
hook = function()
  local info = debug.getinfo(2, 'Sl')
  if info and info.source == '=script' then
    counts[info.currentline] = (counts[info.currentline] or 0) + 1
  end
end

math.randomseed(7)
local limit = '1099511627776'
local clock = math.floor(socket.gettime() * 1000000)
for run = 1, warm + profiled do
  KEYS, ARGV = {}, {}
  for j = 1, batch do
    local now = ''
    if app then
      clock = math.max(clock + math.random(5, 30), math.floor(socket.gettime() * 1000000))
      now = string.format('%d', clock)
    end
    local user = string.format('rate_limit:user:%d', math.random(0, users - 1))
    local block = '{' .. user .. '}#block'
    if j == 1 then
      for _, k in ipairs({user, 'rate_limit:endpoint:/bench', 'rate_limit:global', block,
        '{rate_limit:endpoint:/bench}#block'}) do
        KEYS[#KEYS + 1] = k
      end
      for _, v in ipairs({now, '1000000', '1', '3', '2', limit, limit, limit}) do
        ARGV[#ARGV + 1] = v
      end
    else
      KEYS[#KEYS + 1], KEYS[#KEYS + 2] = user, block
      ARGV[#ARGV + 1], ARGV[#ARGV + 2] = now, ''
    end
  end
  counting = run > warm
  if counting then debug.sethook(hook, '', 1) end
  local reply = chunk()
  debug.sethook()
  counting = false
  if batch > 1 then
    assert(type(reply) == 'table' and #reply == batch, 'one reply per check')
  else
    reply = {reply}
  end
  for _, r in ipairs(reply) do
    assert(r[1] == 4 or r[1] == 1, 'a check not admitted')
  end
end

local lines = {}
for l in io.open(script_path):lines() do lines[#lines + 1] = l end
local total, order = 0, {}
for l, c in pairs(counts) do
  total = total + c
  order[#order + 1] = l
end
local per = profiled * batch
io.write(string.format('%s, batches of %d, %s time: %.1f bytecodes a check\n', script_path,
  batch, app and 'app' or 'Redis', total / per))
table.sort(order, function(a, b) return counts[a] > counts[b] end)
for i = 1, math.min(#order, top) do
  local l = order[i]
  io.write(string.format('%7.1f  %4d  %s\n', counts[l] / per, l, lines[l]))
end
