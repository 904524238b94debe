-- The head of limiterOverrides (scripts/build-lua.mjs: lua/override.lua, this file, then the limiter
-- script's prelude, algorithms and dispatcher, the dispatcher wrapped in a function): the limiter
-- script that also reads the identifier's stored override, in the same call. One GET more than the
-- limiter script.
--
-- KEYS[1..n]   the rule keys of the plan the call names
-- KEYS[n + 1]  the identifier's override key (same hash tag as the rule keys)
-- KEYS[n + 2 ..] keys of windows other than the call's, which another plan of the Limiter gives a
--              fixed or sliding window (usually none)
-- ARGV         as the limiter script's, then reserve ("" for none), then the plan table: per plan of
--              the Limiter, "\n<name>" and 4 tokens per rule, " <p1> <p2> <p3> <k>", ending in "\n";
--              k is the KEYS index of that rule's key under that plan, 0 when it is the call's
--
-- A stored override is `<line>\n<json>`; its line is `=<plan>` or `!` and 4 tokens per rule as the
-- arguments encode them (`<algorithm> <p1> <p2> <p3>`); lua/override.lua reads it (a stale one: the
-- base rules, "default").
-- The answer gains the line as its last element whenever an override is stored.
local A, K = ARGV, KEYS
local n = (#ARGV - 4) / 4
local stored = redis.call("GET", KEYS[n + 1])
local line
if stored then
  line = string.match(stored, "^[^\n]*")
  local chosen = applied(line, ARGV[#ARGV], n, ARGV, 3)
  A, K = {}, {}
  for i = 1, #ARGV do A[i] = ARGV[i] end
  for i = 1, n do
    local at = 4 * (i - 1)
    A[4 + at], A[5 + at], A[6 + at] = chosen[at + 1], chosen[at + 2], chosen[at + 3]
    local k = tonumber(chosen[at + 4])
    K[i] = k == 0 and KEYS[i] or KEYS[k]
  end
end
