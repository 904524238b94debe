-- The head of limiterNestedOverrides (built as limiterOverrides is, with this file as its head): the
-- limiter script for rules keyed by several fields (their `by`), reading the stored override of each
-- field's identifier in the same call. One GET more per field than the limiter script.
--
-- KEYS[1..n]          the rule keys of the plan the call names
-- KEYS[n+1 .. n+m]    the override key of each of the call's m fields' identifiers, in field order
-- KEYS[n+m+1 ..]      keys of windows other than the call's (see lua/overrides.lua)
-- ARGV[1 .. 3+4n]     as the limiter script's: now, cost, 4 per rule, then reserve ("" for none)
-- ARGV[4+4n ..]       the plan table of each field's rules, in field order (lua/override.lua)
-- ARGV[#ARGV]         F: per rule, the place of its field (one character, "1" the first)
--
-- A field's stored override (src/engine/overrides.ts writes it with that field's rules only: its
-- custom line names them alone) stands in for the parameters and keys of the rules keyed by that field.
-- With any stored, the answer gains one element: per field, what its override applied (the plan's
-- tag, the reader's string), or 0 for none.
local A, K = ARGV, KEYS
local F = ARGV[#ARGV]
local n = #F
local m = #ARGV - 4 - 4 * n
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
      -- this field's rules alone, as the reader takes a call's (their algorithms at 4, 8, ...)
      local at, own = {}, { 0, 0 }
      for i = 1, n do
        if string.byte(F, i) - 48 == f then
          at[#at + 1] = i
          own[#own + 1] = ARGV[4 * i - 1]
          own[#own + 1], own[#own + 2], own[#own + 3] = ARGV[4 * i], ARGV[4 * i + 1], ARGV[4 * i + 2]
        end
      end
      local P, tag, applied = override(S[f], ARGV[3 + 4 * n + f], #at, own, 3)
      answer[f] = tag > 0 and tag or applied
      for x, i in ipairs(at) do
        local j, y = 4 * i, 4 * x
        A[j], A[j + 1], A[j + 2] = P[y - 3], P[y - 2], P[y - 1]
        local k = tonumber(P[y])
        K[i] = k == 0 and KEYS[i] or KEYS[k]
      end
    end
  end
end
