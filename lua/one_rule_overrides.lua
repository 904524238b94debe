-- An algorithm's one-rule script with overrides on (scripts/build-lua.mjs: the algorithm's state,
-- `local ALGORITHM = "<name>"` and CUSTOM, its custom line's pattern (lua/override.lua), then this
-- file with the algorithm's one-rule section where `-- #one-rule` stands). One GET more than the
-- one-rule script.
--
-- A template: the engine runs it behind a head of its own per plan (src/engine/scripts/overrides.ts,
-- planScript), `local T, P1, P2, P3, MINE = <the plan table>, <the rule's parameters>, <a pattern>`,
-- so that nothing every call under the plan sends alike travels with each call (an argument costs
-- Redis as much as a dozen lines of the script).
-- T        the plan table (lua/override.lua)
-- P1..P3   the rule's parameters under the call's plan, as the limiter script encodes them
-- MINE     the pattern of a custom line that keeps P2 (lua/override.lua)
-- KEYS[1]  the rule's key under the call's plan; KEYS[2] the identifier's override key; KEYS[3..]
--          keys of windows other than the call's, which another plan gives the rule (usually none)
-- ARGV     the one-rule script's first two: now and cost
-- The one-rule section runs once, inline (no closure, no call), on the call's parameters and key or on
-- those a stored override applies (lua/override.lua reads it): the build names its KEYS[1] KEY and its
-- ARGV[3..5] ARG3..ARG5, locals set below, and makes each of its `return <r>` a `result = <r>` that
-- leaves the `repeat ... until true` around it (so the section may have no loop of its own).
-- Its integer r comes back as r * 64 + the tag of the plan applied (0: nothing stored); for a custom
-- line that changes one parameter by little (lua/override.lua's tag), as r * 2^22 + its tag; else, for a
-- custom or stale override, a plan past the 62nd or |r| beyond 2^47, as a string: r in decimal, then
-- the reader's answer ("#<tag>" for a plan's tag r leaves no room for).
-- (KEYS read once: a global costs about 2 local reads)
local K = KEYS
local stored = redis.call("GET", K[2])
local KEY, ARG3, ARG4, ARG5 = K[1], P1, P2, P3
local p1, p2, p3, k, tag, answer, p1s = nil, nil, nil, nil, 0, nil, nil
if stored then
  -- the call's own parameters
  local own1, own2, own3 = P1, P2, P3
-- #override
  KEY, ARG3, ARG4, ARG5 = k == 0 and KEY or K[k], p1, p2, p3
end
local result
repeat
-- #one-rule
until true
-- a custom line's tag, with room for it; else the line's parameters
if tag >= 63 then
  if result < 2147483648 and result > -2147483648 then return result * 4194304 + tag end
  answer = string.format("!%s %s %s", p1, p2, p3)
end
if not answer and result < 140737488355328 and result > -140737488355328 then return result * 64 + tag end
-- nothing stored and |r| beyond 2^47: r alone; a plan's tag that r leaves no room for: "#" and the tag
if not answer then return string.format(stored and "%d#%d" or "%d", result, tag) end
return string.format("%d%s", result, answer)
