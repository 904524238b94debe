-- The head of limiterOverrides (scripts/build-lua.mjs: this file, then the limiter script's prelude,
-- algorithms and dispatcher, the dispatcher wrapped in a function): the limiter script that also
-- reads the identifier's stored override, in the same call. One GET more than the limiter script.
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
-- arguments encode them (`<algorithm> <p1> <p2> <p3>`). A plan this Limiter does not have, or a custom
-- line whose algorithms or windows do not fit its rules, is stale: the base rules ("default") decide.
-- The answer gains the line as its last element whenever an override is stored.
local A, K = ARGV, KEYS
local n = (#ARGV - 4) / 4
local stored = redis.call("GET", KEYS[n + 1])
local line
if stored then
  line = string.match(stored, "^[^\n]*")
  local T = ARGV[#ARGV]
  -- a plan's line of the table: its 4n tokens, or nil
  local function plan_line(name)
    local at = string.find(T, "\n" .. name .. " ", 1, true)
    if not at then return nil end
    local t = {}
    for token in string.gmatch(string.sub(T, at + #name + 2, string.find(T, "\n", at + 1, true) - 1), "%S+") do
      t[#t + 1] = token
    end
    return t
  end
  local chosen
  local kind = string.sub(line, 1, 1)
  if kind == "=" then
    chosen = plan_line(string.sub(line, 2))
  elseif kind == "!" then
    local t = {}
    for token in string.gmatch(string.sub(line, 2), "%S+") do t[#t + 1] = token end
    if #t == 4 * n then
      chosen = {}
      for i = 1, n do
        local at = 4 * (i - 1)
        local algorithm = t[at + 1]
        if algorithm ~= ARGV[3 + at] then chosen = nil break end
        chosen[at + 1], chosen[at + 2], chosen[at + 3], chosen[at + 4] = t[at + 2], t[at + 3], t[at + 4], "0"
        -- a window other than the call's counts in that window's key, which some plan declared
        if (algorithm == "fixedWindow" or algorithm == "slidingWindow") and t[at + 3] ~= ARGV[4 + at + 1] then
          local k
          for plan in string.gmatch(T, "[^\n]+") do
            local p = {}
            for token in string.gmatch(plan, "%S+") do p[#p + 1] = token end
            if p[at + 3] == t[at + 3] then k = p[at + 5] break end
          end
          if not k then chosen = nil break end
          chosen[at + 4] = k
        end
      end
    end
  end
  chosen = chosen or plan_line("default")
  A, K = {}, {}
  for i = 1, #ARGV do A[i] = ARGV[i] end
  for i = 1, n do
    local at = 4 * (i - 1)
    A[4 + at], A[5 + at], A[6 + at] = chosen[at + 1], chosen[at + 2], chosen[at + 3]
    local k = tonumber(chosen[at + 4])
    K[i] = k == 0 and KEYS[i] or KEYS[k]
  end
end
