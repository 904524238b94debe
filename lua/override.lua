-- Which parameters and keys a stored override's line applies: shared by limiterOverrides (its head,
-- lua/overrides.lua) and the one-rule scripts with overrides on (lua/one_rule_overrides.lua).
--
-- line  the stored line: `=<plan>` or `!` and 4 tokens per rule (`<algorithm> <p1> <p2> <p3>`)
-- T     the plan table: per plan of the Limiter, "\n<name>" and " <p1> <p2> <p3> <k>" per rule, ending
--       in "\n"; k is the KEYS index of that rule's key under that plan, 0 when it is the call's
-- n     the number of rules; call[o ..] the call's own 4 tokens per rule, as the line's
-- Returns 4 tokens per rule, p1 p2 p3 k. A plan this Limiter does not have, or a custom line whose
-- algorithms or windows do not fit its rules, is stale: the base rules' ("default").
local function applied(line, T, n, call, o)
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
        if algorithm ~= call[o + at] then chosen = nil break end
        -- a sliding window keeps its counts in another format from a limit of 2^25 (PACK): a line
        -- across that bound (written for other base rules) is stale
        if algorithm == "slidingWindow" and (tonumber(t[at + 2]) < 33554432) ~= (tonumber(call[o + at + 1]) < 33554432) then
          chosen = nil
          break
        end
        chosen[at + 1], chosen[at + 2], chosen[at + 3], chosen[at + 4] = t[at + 2], t[at + 3], t[at + 4], "0"
        -- a window other than the call's counts in that window's key, which some plan declared
        if (algorithm == "fixedWindow" or algorithm == "slidingWindow") and t[at + 3] ~= call[o + at + 2] then
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
  return chosen or plan_line("default")
end
