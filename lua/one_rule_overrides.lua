-- An algorithm's one-rule script with overrides on (scripts/build-lua.mjs: the algorithm's state,
-- `local ALGORITHM = "<name>"`, lua/override.lua, then this file with the algorithm's one-rule
-- section where `-- #one-rule` stands). One GET more than the one-rule script.
--
-- KEYS[1]  the rule's key under the call's plan; KEYS[2] the identifier's override key; KEYS[3..]
--          keys of windows other than the call's, which another plan gives the rule (usually none)
-- ARGV     the one-rule script's (now, cost, then the rule's parameters as the limiter script encodes
--          them), then the plan table (lua/override.lua)
-- A stored override's parameters and key stand in for the call's; the one-rule section runs as it
-- stands, its KEYS and ARGV those. Answers its integer, or { integer, line } when an override is stored.
local keys, args = KEYS, ARGV
local stored = redis.call("GET", KEYS[2])
local line
if stored then
  line = string.match(stored, "^[^\n]*")
  local chosen = applied(line, ARGV[#ARGV], 1, { ALGORITHM, ARGV[3], ARGV[4] }, 1)
  local k = tonumber(chosen[4])
  keys = { k == 0 and KEYS[1] or KEYS[k] }
  args = { ARGV[1], ARGV[2], chosen[1], chosen[2], chosen[3] }
end
local function one_rule(KEYS, ARGV)
-- #one-rule
end
local result = one_rule(keys, args)
if line then return { result, line } end
return result
