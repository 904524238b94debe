-- The head of limiterOverrides (scripts/build-lua.mjs: this file, then the limiter script's prelude,
-- algorithms and dispatcher, the dispatcher wrapped in a function): the limiter script that also reads
-- the identifier's stored override, in the same call. One GET more than the limiter script.
--
-- KEYS[1..n]   the rule keys of the plan the call names
-- KEYS[n + 1]  the identifier's override key (same hash tag as the rule keys)
-- KEYS[n + 2 ..] keys of windows other than the call's, which another plan of the Limiter gives a
--              fixed or sliding window (usually none)
-- ARGV         as the limiter script's, then reserve ("" for none), then the plan table T
--              (lua/override.lua)
--
-- A stored override's parameters and keys stand in for the call's (lua/override.lua reads it). With
-- one stored, the answer gains one element: what it applied, the plan's tag (an integer) or the
-- reader's string.
local A, K = ARGV, KEYS
local n = (#ARGV - 4) / 4
local stored = redis.call("GET", KEYS[n + 1])
local answer
if stored then
-- #override
  local P, tag
  P, tag, answer = override(stored, ARGV[#ARGV], n, ARGV, 3)
  if tag > 0 then answer = tag end
  A, K = { unpack(ARGV) }, {}
  for i = 1, n do
    local j = 4 * i
    A[j], A[j + 1], A[j + 2] = P[j - 3], P[j - 2], P[j - 1]
    local k = tonumber(P[j])
    K[i] = k == 0 and KEYS[i] or KEYS[k]
  end
end
