-- An algorithm's one-rule script with overrides on (scripts/build-lua.mjs: the algorithm's state,
-- `local ALGORITHM = "<name>"` and CUSTOM, its custom line's pattern (lua/override.lua), then this
-- file with the algorithm's one-rule section where `-- #one-rule` stands). One GET more than the
-- one-rule script.
--
-- KEYS[1]  the rule's key under the call's plan; KEYS[2] the identifier's override key; KEYS[3..]
--          keys of windows other than the call's, which another plan gives the rule (usually none)
-- ARGV     the one-rule script's (now, cost, then the rule's parameters as the limiter script encodes
--          them), then the plan table T (lua/override.lua)
-- The one-rule section runs on the call's parameters and key or on those a stored override applies
-- (lua/override.lua reads it), as the body of one_rule: the build names its KEYS[1] KEY and its
-- ARGV[i] ARGi, so that an override's parameters are passed as they are, with no table built per call.
-- Its integer r comes back as r * 64 + the tag of the plan applied (0: nothing stored); for a custom
-- line that changes one parameter by little (lua/override.lua's tag), as r * 2^22 + its tag; else, for a
-- custom or stale override, a plan past the 62nd or |r| beyond 2^47, as a string: r in decimal, then
-- the reader's answer ("#<tag>" for a plan's tag r leaves no room for).
local function one_rule(KEY, ARG1, ARG2, ARG3, ARG4, ARG5)
-- #one-rule
end
local stored = redis.call("GET", KEYS[2])
if not stored then
  local r = one_rule(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5])
  if r < 140737488355328 and r > -140737488355328 then return r * 64 end
  return string.format("%d", r)
end
-- the call's own parameters: a window's third is 0 (src/engine/algorithms/shared.ts), and then ARGV[5]
-- is already T
local T, own1, own2, own3 = ARGV[#ARGV], ARGV[3], ARGV[4], #ARGV > 5 and ARGV[5] or "0"
local p1, p2, p3, k, tag, answer = nil, nil, nil, nil, 0, nil
-- #override
local r = one_rule(k == 0 and KEYS[1] or KEYS[k], ARGV[1], ARGV[2], p1, p2, p3)
-- a custom line's tag, with room for it; else the line's parameters
if tag >= 63 then
  if r < 2147483648 and r > -2147483648 then return r * 4194304 + tag end
  answer = string.format("!%s %s %s", p1, p2, p3)
end
if not answer and r < 140737488355328 and r > -140737488355328 then return r * 64 + tag end
-- a plan's tag that r leaves no room for: "#" and the tag
if not answer then return string.format("%d#%d", r, tag) end
return string.format("%d%s", r, answer)
