-- The one reader of a stored override: which parameters and keys it applies, and what the script answers
-- about it. scripts/build-lua.mjs puts this file in every script that reads an override: before
-- limiterOverrides' head (lua/overrides.lua) and before each algorithm's one-rule script with overrides
-- on (lua/one_rule_overrides.lua, or the algorithm's own one-rule-overrides section).
--
-- stored  the stored override, `<line>\n<json>` (src/engine/overrides.ts writes it); its line is
--         `=<plan>`, or `!` and 4 tokens per rule, `<algorithm> <p1> <p2> <p3>`, as the limiter script's
--         arguments encode a rule
-- T       the plan table: per plan of the Limiter, "\n<name>" and " <p1> <p2> <p3> <k>" per rule, ending
--         in "\n"; k is the KEYS index of that rule's key under that plan, 0 when it is the call's
-- n, A, o the call's n rules: rule i's algorithm is A[o + 4(i-1)], its limit A[o + 4(i-1) + 1]
--
-- Returns 4 tokens per rule, p1 p2 p3 k, and the answer for the engine, which reads what was applied
-- from it (it never reads a line):
--   "=<plan>"                that plan's rules
--   "!<p1> <p2> <p3>[ ...]"  custom parameters, 3 per rule in rule order
--   "?<line>"                a stale line, and the base rules' ("default"): a plan this Limiter does
--                            not have, or rules that do not fit its own (another algorithm or number of
--                            rules, a window no plan gives that rule, a sliding window's limit across
--                            PACK, where its counts change format)
-- Only digits are parameters (the engine writes nothing else). Nothing runs when nothing is stored, and
-- a stored override costs a few string.find()s over its line and T.
local function override(stored, T, n, A, o)
  local kind, rest = string.match(stored, "^([=!])([^\n]*)")
  local P, at = { nil, nil, nil, nil }, nil
  if kind == "=" then
    at = string.find(T, "\n" .. rest .. " ", 1, true)
    if at then at = at + #rest end
  elseif kind == "!" then
    local answer, e, _, algorithm = "!", 0, nil, nil
    for i = 1, n do
      local j = 4 * i
      _, e, algorithm, P[j - 3], P[j - 2], P[j - 1] = string.find(rest, "^ ?(%a+) (%d+) (%d+) (%d+)", e + 1)
      if algorithm ~= A[o + j - 4] then e = nil break end
      P[j] = "0"
      if algorithm == "fixedWindow" or algorithm == "slidingWindow" then
        -- its window's key: the call's (k 0) or another plan's with that window; none is stale
        P[j] = string.match(T, "\n[^ \n]+" .. string.rep(" %d+ %d+ %d+ %d+", i - 1) .. " %d+ " .. P[j - 2] .. " %d+ (%d+)")
        if not P[j] then e = nil break end
        -- the packed state holds counts below PACK = 2^25: a limit across it is another format
        if algorithm == "slidingWindow" and (tonumber(P[j - 3]) < 33554432) ~= (tonumber(A[o + j - 3]) < 33554432) then
          e = nil
          break
        end
      end
      answer = answer .. (i > 1 and " " or "") .. P[j - 3] .. " " .. P[j - 2] .. " " .. P[j - 1]
    end
    if e == #rest then return P, answer end
  end
  local answer
  if at then
    answer = "=" .. rest
  else
    answer = "?" .. string.match(stored, "^[^\n]*")
    at = string.find(T, "\ndefault ", 1, true) + 7
  end
  local e, _ = at, nil
  for i = 1, n do
    local j = 4 * i
    _, e, P[j - 3], P[j - 2], P[j - 1], P[j] = string.find(T, "^ (%d+) (%d+) (%d+) (%d+)", e + 1)
  end
  return P, answer
end
