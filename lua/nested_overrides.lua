-- The head of limiterNestedOverrides (built as limiterOverrides is, with this file as its head): the
-- limiter script for rules keyed by several fields (their `by`), reading the stored override of each
-- field's identifier in the same call. One GET more per field than the limiter script.
--
-- KEYS[1..n]          the rule keys of the plan the call names
-- KEYS[n+1 .. n+m]    the override key of each of the call's m fields' identifiers, in field order
-- KEYS[n+m+1 ..]      keys of windows other than the call's (see lua/overrides.lua)
-- ARGV                as limiterOverrides', then F: per rule, the place of its field (one character,
--                     "1" the first)
--
-- A field's stored override stands in for the call's parameters and keys of the rules keyed by that
-- field only (lua/override.lua reads it). With any stored, the answer gains one element: per field,
-- what its override applied (the plan's tag, the reader's string), or 0 for none.
local A, K = ARGV, KEYS
local n = (#ARGV - 5) / 4
local F = ARGV[#ARGV]
local m = 0
for i = 1, n do
  local f = string.byte(F, i) - 48
  if f > m then m = f end
end
local S, any = {}, false
for f = 1, m do
  S[f] = redis.call("GET", KEYS[n + f])
  if S[f] then any = true end
end
local answer
if any then
-- #override
  A, K, answer = { unpack(ARGV) }, {}, {}
  for i = 1, n do K[i] = KEYS[i] end
  for f = 1, m do
    answer[f] = 0
    if S[f] then
      local P, tag, applied = override(S[f], ARGV[#ARGV - 1], n, ARGV, 3)
      answer[f] = tag > 0 and tag or applied
      for i = 1, n do
        if string.byte(F, i) - 48 == f then
          local j = 4 * i
          A[j], A[j + 1], A[j + 2] = P[j - 3], P[j - 2], P[j - 1]
          local k = tonumber(P[j])
          K[i] = k == 0 and KEYS[i] or KEYS[k]
        end
      end
    end
  end
end
