-- Shared by every algorithm file; the build puts this first, then the algorithms, then dispatcher.lua.
-- Each algorithm is a function (key, now, cost, p1, p2, p3) -> result table:
--   ok, retry            admitted?  if not, ms until it could be (NEVER when the cost exceeds the limit)
--   limit                the rule's limit as reported to callers
--   left_now, reset_now  remaining units and full-reset time as the state stands (no consumption)
--   left, reset, write   the same after consuming `cost`, and the function that stores it (when ok)
-- Everything that can fail (reading, parsing) happens in the check; `write` runs only once every rule
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
