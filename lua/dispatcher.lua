-- The dispatcher: checks every rule for one identifier, then commits all of them or none.
--
-- KEYS[i]  the state key of rule i (all keys of a call share one cluster hash tag)
-- ARGV[1]  now, epoch ms, from the caller's clock
-- ARGV[2]  cost, a whole number of units; 0 peeks (answers for a cost of 1, writes nothing)
-- ARGV[3 + 4(i-1) ..]  rule i: algorithm name, then up to three integer parameters
--
-- Returns 4 integers per rule: allowed (1/0), remaining, resetAt (epoch ms), retryAfter (ms; -1 = never).
local now = tonumber(ARGV[1])
local cost = tonumber(ARGV[2])
local peek = cost == 0
if peek then cost = 1 end

local function check(i)
  local at = 3 + 4 * (i - 1)
  local algorithm = algorithms[ARGV[at]]
  if not algorithm then error("edgelimit: unknown algorithm " .. tostring(ARGV[at])) end
  return algorithm(KEYS[i], now, cost, tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3]))
end

-- One rule, the common case: no tables but the answer.
if #KEYS == 1 then
  local ok, retry, left_now, reset_now, left, reset, write, w1, w2, w3 = check(1)
  if not ok then return { 0, math.max(0, left_now), reset_now, retry } end
  if peek then return { 1, left_now, reset_now, 0 } end
  write(KEYS[1], now, w1, w2, w3)
  return { 1, left, reset, 0 }
end

local checks, admitted = {}, true
for i = 1, #KEYS do
  local r = { check(i) }
  checks[i] = r
  admitted = admitted and r[1]
end
local commit = admitted and not peek
local out = {}
for i, r in ipairs(checks) do
  if commit then r[7](KEYS[i], now, r[8], r[9], r[10]) end
  local n = 4 * (i - 1)
  out[n + 1] = r[1] and 1 or 0
  out[n + 2] = math.max(0, commit and r[5] or r[3])
  out[n + 3] = commit and r[6] or r[4]
  out[n + 4] = r[2]
end
return out
