-- An algorithm's one-rule script with overrides on (scripts/build-lua.mjs: the algorithm's state,
-- `local ALGORITHM = "<name>"`, then this file with the algorithm's one-rule section where
-- `-- #one-rule` stands). One GET more than the one-rule script.
--
-- KEYS[1]  the rule's key under the call's plan; KEYS[2] the identifier's override key; KEYS[3..]
--          keys of windows other than the call's, which another plan gives the rule (usually none)
-- ARGV     the one-rule script's (now, cost, then the rule's parameters as the limiter script encodes
--          them), then the plan table T (lua/override.lua)
-- The one-rule section runs as it stands, on the call's parameters and key or on those a stored
-- override applies (lua/override.lua reads it). Its integer r comes back as r * 64 + the tag of the
-- plan applied (0: nothing stored; the call's plan), or, for a custom or stale override, a plan past the
-- 62nd or an r beyond 2^47, as a string: r in decimal, then the reader's string.
local function one_rule(KEYS, ARGV)
-- #one-rule
end
local stored = redis.call("GET", KEYS[2])
local keys, args, tag, answer = KEYS, ARGV, 0, ""
if stored then
-- #override
  local P
  P, tag, answer = override(stored, ARGV[#ARGV], 1, { ALGORITHM, ARGV[3] }, 1)
  keys = { P[4] == "0" and KEYS[1] or KEYS[tonumber(P[4])] }
  args = { ARGV[1], ARGV[2], P[1], P[2], P[3] }
end
local r = one_rule(keys, args)
if (tag > 0 or not stored) and r < 140737488355328 and r > -140737488355328 then return r * 64 + tag end
return string.format("%d%s", r, answer)
