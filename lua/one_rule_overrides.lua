-- An algorithm's one-rule script with overrides on (scripts/build-lua.mjs: the algorithm's state,
-- `local ALGORITHM = "<name>"`, then this file with the algorithm's one-rule section where
-- `-- #one-rule` stands). One GET more than the one-rule script.
--
-- KEYS[1]  the rule's key under the call's plan; KEYS[2] the identifier's override key; KEYS[3..]
--          keys of windows other than the call's, which another plan gives the rule (usually none)
-- ARGV     the one-rule script's (now, cost, then the rule's parameters as the limiter script encodes
--          them), then the plan table T (lua/override.lua)
-- The one-rule section runs as it stands, on the call's parameters and key or on those a stored
-- override applies (lua/override.lua reads it). Its integer comes back as it is when nothing is stored,
-- else as a string: the integer in decimal, then the reader's string (its results, a sliding window's
-- packed counts, leave no room for a tag in the integer).
local function one_rule(KEYS, ARGV)
-- #one-rule
end
local stored = redis.call("GET", KEYS[2])
if not stored then return one_rule(KEYS, ARGV) end
-- #override
local P, _, answer = override(stored, ARGV[#ARGV], 1, { ALGORITHM, ARGV[3], ARGV[4] }, 1)
local k = tonumber(P[4])
local key = k == 0 and KEYS[1] or KEYS[k]
return string.format("%d%s", one_rule({ key }, { ARGV[1], ARGV[2], P[1], P[2], P[3] }), answer)
