-- The one reader of a stored override: which parameters and keys it applies, and what the script answers
-- about it. scripts/build-lua.mjs puts this file where `-- #override` stands in every script that reads
-- an override (lua/overrides.lua, lua/one_rule_overrides.lua, fixed_window.lua's one-rule-overrides):
-- inside the branch that runs only when an override is stored, so that a call with none pays nothing.
--
-- stored  the stored override, `<line>\n<json>`, or a plan's line alone, `=<plan>\n`
--         (src/engine/overrides.ts writes it); its line is
--         `=<plan>`, or `!` and 4 tokens per rule, `<algorithm> <p1> <p2> <p3>`, as the limiter script's
--         arguments encode a rule
-- T       the plan table (src/engine/scripts/overrides.ts builds it once per plan of the call): per
--         plan of the Limiter, "\n=<name>\n", its tag, then per rule "<k> <p1> <p2> <p3> "; then per fixed
--         or sliding window rule i and window w that a plan gives it, "\n#<i> <w> " and k; ending in
--         "\n". k is one character, 48 + the KEYS index of that rule's key in that window ("0": the
--         call's own); the tag is one character, the plan's place in the table plus 65 ("A" the first),
--         or "@" past the 62nd. A plan's record starts with its stored line and the line's end, so the
--         line is what a reader looks for (a plan's name is letters, digits, "_", "." and "-")
-- n, A, o the call's n rules: rule i's algorithm is A[o + 4(i-1)], its parameters the 3 after it
--
-- Returns 4 values per rule, p1 p2 p3 k (tonumber() reads each), then what the script answers the
-- engine, which learns what applied from that alone (it never reads a line): a tag, the plan's place
-- in the table plus 1 (0: none), and a string:
--   "=<plan>"                that plan's rules
--   "!<p1> <p2> <p3>[ ...]"  custom parameters, 3 per rule in rule order
--   "?<line>"                a stale line, and the base rules' ("default"): a plan this Limiter does
--                            not have, or rules that do not fit its own (another algorithm or number of
--                            rules, a window no plan gives that rule, a sliding window's limit across
--                            PACK, where its counts change format)
-- Only digits are parameters (the engine writes nothing else). A plan costs a match of the line, a
-- plain find and one find per rule in T; a custom line one find per rule, and one plain find per
-- window other than the call's.
local function override(stored, T, n, A, o)
  local kind, line = string.byte(stored, 1), nil
  local P, at, e, _ = { nil, nil, nil, nil }, nil, nil, nil
  if kind == 61 then
    -- "=<plan>\n": its record in T
    line = string.match(stored, "^=[^\n]*\n")
    if line then at, e = string.find(T, line, 1, true) end
  elseif kind == 33 then
    -- "!": per rule the call's algorithm (letters), then 3 parameters; then the line's end
    local answer = "!"
    e = 1
    for i = 1, n do
      local j = 4 * i
      _, e, P[j - 3], P[j - 2], P[j - 1] = string.find(stored, "^ ?" .. A[o + j - 4] .. " (%d+) (%d+) (%d+)", e + 1)
      if not e then break end
      P[j] = 0
      local algorithm = A[o + j - 4]
      if (algorithm == "fixedWindow" or algorithm == "slidingWindow") and P[j - 2] ~= A[o + j - 2] then
        -- another window than the call's: the key of a plan with that window; none is stale
        local _, w = string.find(T, "\n#" .. i .. " " .. P[j - 2] .. " ", 1, true)
        if not w then e = nil break end
        P[j] = string.byte(T, w + 1) - 48
      end
      -- the packed state holds counts below PACK = 2^25: a limit across it is another format
      if algorithm == "slidingWindow" and (tonumber(P[j - 3]) < 33554432) ~= (tonumber(A[o + j - 3]) < 33554432) then
        e = nil
        break
      end
      answer = answer .. (i > 1 and " " or "") .. P[j - 3] .. " " .. P[j - 2] .. " " .. P[j - 1]
    end
    if e and (e == #stored or string.byte(stored, e + 1) == 10) then return P, 0, answer end
  end
  local tag, answer = 0, nil
  if at then
    tag, answer = string.byte(T, e + 1) - 64, string.sub(line, 1, -2)
  else
    answer = "?" .. string.match(stored, "^[^\n]*")
    at, e = string.find(T, "\n=default\n", 1, true)
  end
  -- e + 2: the first rule's k
  e = e + 1
  for i = 1, n do
    local j = 4 * i
    P[j] = string.byte(T, e + 1) - 48
    _, e, P[j - 3], P[j - 2], P[j - 1] = string.find(T, "^ (%d+) (%d+) (%d+) ", e + 2)
  end
  return P, tag, answer
end
-- #one
-- The same for one rule (a one-rule script's variant), inline: no closure, no call, no table. It reads
-- stored, T, ALGORITHM, CUSTOM (the algorithm's custom line as a pattern, to the line's end,
-- "^!<algorithm> (%d+) (%d+) (%d+)%f[\n%z]": a constant, no pattern is built per call), MINE (the same
-- with the call's second parameter) and the call's own parameters, own1 own2 own3 (T, MINE and they
-- are constants of the script the engine built for the call's plan: lua/one_rule_overrides.lua); it
-- sets the includer's locals p1 p2 p3 (strings; p1 a number when a plan's bytes or a custom line's tag
-- gave it, below), p1s (the digits of the limit of a custom line MINE matched, nil
-- once the line reads as stale), k (a number), tag and answer.
--   tag     0 (none, or a plan past the 62nd), a plan's (1..62), or, for a custom line that changes at
--           most one of the call's parameters, to a value of at most 4 digits, in the call's own key
--           (k = 0), (value * 4 + which) * 64 + 63 (which: 1..3, 0 for none): the includer puts that
--           beside r in one integer (r * 2^22 + tag, while |r| < 2^31)
--   answer  nil when the tag says it; else the string that does (a custom line answers itself,
--           "!<algorithm> <p1> <p2> <p3>"; one with a tag, "!<p1> <p2> <p3>", made by the includer
--           only when r leaves the tag no room)
-- Each call of a string function costs as much as the rest of the reader together, so it makes few: a
-- custom line is one match (and, for a window other than the call's, a find and a byte in T); a plan
-- alone, a plain find of its line in T and one byte read for its tag, its k and, for a window in the
-- call's window whose limit has at most 4 digits, that limit (else one match of its parameters: a
-- window's limit alone, its window being the call's unless k says otherwise). Numbers are compared as
-- the digits they are written in, and a value's digits are made a number by arithmetic, not
-- tonumber() (the engine writes no leading zero).
-- e: a custom line's end; at: the end of the head of the record whose parameters apply, after a line's
-- end in T (a value found nowhere else is a record's: T has no "!", and "=" only in its records'
-- heads). A plan alone is stored as its line, `=<plan>\n`, short (a custom line has its json after
-- it): looked up as it is, first; a custom line is matched first
local e, at, line, _ = nil, nil, stored, nil
if #stored < 32 then
  -- (only a whole line is a plan's: a value that stops inside one, "=pr" of "=pro\n" written by
  -- hand, is found but ends on no line's end, read below with the tag: stale)
  _, at = string.find(T, "\n" .. stored, 1, true)
end
if not at then
  -- the usual custom line first, one that keeps the call's second parameter (MINE: two captures, to
  -- the line's end, which the line's json follows); then any (a window's third parameter is how it
  -- counts, CountingOptions: the rule's own, as no override changes it, but read as every other
  -- parameter is)
  _, e, p1, p3 = string.find(stored, MINE)
  if e then
    -- (its limit's digits, which MINE takes without a leading zero, as the engine writes them: the
    -- includer may compare them with a count's, fixed_window.lua)
    p2, e, p1s = own2, e - 1, p1
  else
    _, e, p1, p2, p3 = string.find(stored, CUSTOM)
  end
end
if e then
  k = 0
  -- another window than the call's: the key of a plan with that window; none is stale
  if (ALGORITHM == "fixedWindow" or ALGORITHM == "slidingWindow") and p2 ~= own2 then
    local _, w = string.find(T, "\n#1 " .. p2 .. " ", 1, true)
    k = w and string.byte(T, w + 1) - 48
  end
  -- the packed state holds counts below PACK = 2^25 = 33554432, the only state the one-rule script
  -- reads (the call's own limit is below it): a larger limit is another format
  if ALGORITHM == "slidingWindow" and (#p1 > 8 or #p1 == 8 and p1 >= "33554432") then k = nil end
  if k == 0 then
    local changed, which, value = 0, 0, "0"
    if p1 ~= own1 then changed, which, value = 1, 1, p1 end
    if p2 ~= own2 then changed, which, value = changed + 1, 2, p2 end
    if p3 ~= own3 then changed, which, value = changed + 1, 3, p3 end
    if changed < 2 and #value <= 4 then
      -- (the limit a number once: the includer reads it as one)
      value = value + 0
      if which == 1 then p1 = value end
      tag = (value * 4 + which) * 64 + 63
    end
  end
  if k and tag == 0 then answer = string.sub(stored, 1, e) end
else
  if not at then
    -- a plan's line with more after it: the line is cut first
    line = string.match(stored, "^=[^\n]*\n")
    -- (a line alone of 32 characters or more, a long plan name, was not looked up whole above)
    if line and (line ~= stored or #stored >= 32) then _, at = string.find(T, "\n" .. line, 1, true) end
  end
  if at then
    -- its tag and k, as characters (a tag from "@"), and the bytes after them: a window's limit in the
    -- call's window (k = 0), of up to 4 digits, is read from them by arithmetic (the call that would
    -- match it costs more than the rest)
    local nl, d1, d2, d3, d4, d5
    nl, tag, k, _, d1, d2, d3, d4, d5 = string.byte(T, at, at + 8)
    if nl == 10 and tag and tag >= 64 then
      tag, k = tag - 64, k - 48
      if tag == 0 then answer = string.sub(line, 1, -2) end
      if k == 0 and (ALGORITHM == "fixedWindow" or ALGORITHM == "slidingWindow") then
        -- (digits are 48 + their value; 32 a space)
        if d2 == 32 then
          p1 = d1 - 48
        elseif d3 == 32 then
          p1 = d1 * 10 + d2 - 528
        elseif d4 == 32 then
          p1 = d1 * 100 + d2 * 10 + d3 - 5328
        elseif d5 == 32 then
          p1 = d1 * 1000 + d2 * 100 + d3 * 10 + d4 - 53328
        end
        -- read: its window is the call's, how it counts the rule's own (as below)
        if p1 then at, p2, p3 = nil, own2, own3 end
      end
    else
      tag, k = 0, nil
    end
  end
end
if not k then
  -- stale: the base rules'
  _, at = string.find(T, "\n=default\n", 1, true)
  k = string.byte(T, at + 2) - 48
  tag, answer, p1s = 0, "?" .. string.match(stored, "^[^\n]*"), nil
end
if at then
  -- a record's parameters: a window's limit alone, its window (k = 0: the call's own, own2) captured
  -- only when it is another; else all three at once
  if ALGORITHM == "fixedWindow" or ALGORITHM == "slidingWindow" then
    if k == 0 then
      _, _, p1 = string.find(T, "^ (%d+)", at + 3)
      p2 = own2
    else
      _, _, p1, p2 = string.find(T, "^ (%d+) (%d+)", at + 3)
    end
    -- how it counts is the rule's own (no plan changes it): the call's
    p3 = own3
  else
    _, _, p1, p2, p3 = string.find(T, "^ (%d+) (%d+) (%d+)", at + 3)
  end
end
