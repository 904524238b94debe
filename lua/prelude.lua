-- Shared by every algorithm file; the build puts this first, then the algorithms, then dispatcher.lua.
--
-- Each algorithm is a function (key, now, cost, p1, p2, p3) returning plain values, no table (this
-- script runs on every decision, and tables and closures cost Redis time):
--   ok, retry, left_now, reset_now, left, reset, write, w1, w2, w3
--   ok, retry            admitted?  if not, ms until it could be (NEVER when the cost exceeds the limit)
--   left_now, reset_now  remaining units and full-reset time as the state stands (nothing consumed)
--   left, reset          the same after consuming `cost` (when ok)
--   write, w1..w3        how to store that: the dispatcher calls write(key, now, w1, w2, w3)
-- Everything that can fail (reading, parsing) happens in the check; a write runs only once every rule
-- has admitted, and must not fail: Redis does not undo a script's writes when it errors midway.
-- All arithmetic is on integers (Lua doubles are exact below 2^53).
local algorithms = {}
local NEVER = -1
local ZADD_CHUNK = 1000

local function ceil_div(a, b)
  return math.floor((a + b - 1) / b)
end

-- Lua's own number-to-string conversion keeps only 14 digits; state must round-trip exactly.
local function int(x)
  return string.format("%d", x)
end

-- The write of every single-string state: the value, and how long it matters.
local function set_px(key, now, value, ttl)
  redis.call("SET", key, value, "PX", ttl)
end
