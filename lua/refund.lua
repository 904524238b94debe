-- Gives back units a lease reserved and never handed out, under every rule of one identifier.
--
-- KEYS[i]  the state key of rule i, as the limiter script wrote it
-- ARGV[1]  now, epoch ms, from the caller's clock
-- ARGV[2]  units to give back (whole, > 0)
-- ARGV[3 + 5(i-1) ..]  rule i: algorithm name, its three integer parameters (as the limiter sends
--          them), and the start of the window the units were counted in (0 for gcra)
--
-- Exact for gcra and the token bucket (which runs as gcra): the state moves back by exactly the
-- units; and for the fixed window, in the window the units were counted in (KEYS[i] names it). The
-- sliding window gives them back to its current counter, or to its previous one once that window
-- has become the previous. A state already
-- gone (expired, reset) is left alone: there is nothing to give back to. Nothing is ever created, a
-- key keeps its expiry or gets the one its new state needs, and no stored time moves. Sliding log
-- rules are never leased, so they are never refunded. Returns the number of rules given back to.
-- Stands alone (no prelude): the limiter's prelude then builds no helper it does not use itself.
local now = tonumber(ARGV[1])
local units = tonumber(ARGV[2])
local done = 0

local function ceil_div(a, b)
  return math.floor((a + b - 1) / b)
end

-- an integer inside a string: Lua's own `..` keeps only 14 digits
local function int(x)
  return string.format("%d", x)
end

local refund = {}

-- TAT = A + B/limit ms; d = TAT - now in 1/limit ms. Giving back n units moves TAT back by n*T.
refund.gcra = function(key, limit, period)
  local stored = redis.call("GET", key)
  if not stored then return false end
  local a, b = string.match(stored, "^(%-?%d+):(%d+)$")
  local d = (tonumber(a) - now) * limit + tonumber(b) - units * period
  if d <= 0 then
    -- back to idle: the same as no state at all
    redis.call("DEL", key)
  else
    local whole = math.floor(d / limit)
    redis.call("SET", key, int(now + whole) .. ":" .. int(d - whole * limit), "PX", ceil_div(d, limit))
  end
  return true
end

-- the window's count, in the window's own key (see lua/algorithms/fixed_window.lua; KEYS[i] is the
-- key of the window the units were counted in). A count above the limit (a denial's harmless
-- overshoot) counts as the limit.
refund.fixedWindow = function(key, limit)
  local count = tonumber(redis.call("GET", key))
  if not count then return false end
  redis.call("SET", key, math.max(0, math.min(count, limit) - units), "KEEPTTL")
  return true
end

local PACK, STAMP = 2 ^ 25, 2 ^ 50
refund.slidingWindow = function(key, limit, window, _, start)
  local stored = redis.call("GET", key)
  if not stored then return false end
  if limit < PACK then
    local value = tonumber(stored)
    if not value then return false end
    local index = start / window
    local stamp = math.floor(value / STAMP)
    local counts = value - stamp * STAMP
    local c = math.floor(counts / PACK)
    local p = counts - c * PACK
    if stamp == index % 4 + 1 then
      c = math.max(0, c - units)
    elseif stamp == (index + 1) % 4 + 1 then
      p = math.max(0, p - units)
    else
      return false
    end
    redis.call("SET", key, stamp * STAMP + c * PACK + p, "KEEPTTL")
    return true
  end
  local s, c, p = string.match(stored, "^(%-?%d+):(%d+):(%d+)$")
  if not s then return false end
  s, c, p = tonumber(s), tonumber(c), tonumber(p)
  if s == start then
    c = math.max(0, c - units)
  elseif s == start + window then
    p = math.max(0, p - units)
  else
    return false
  end
  redis.call("SET", key, int(s) .. ":" .. int(c) .. ":" .. int(p), "KEEPTTL")
  return true
end

for i = 1, #KEYS do
  local at = 3 + 5 * (i - 1)
  local give = refund[ARGV[at]]
  if give and give(KEYS[i], tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3]),
      tonumber(ARGV[at + 4])) then
    done = done + 1
  end
end
return done
