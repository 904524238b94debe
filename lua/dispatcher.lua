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

local checks, admitted = {}, true
for i = 1, #KEYS do
  local at = 3 + 4 * (i - 1)
  local check = algorithms[ARGV[at]]
  if not check then return redis.error_reply("ERR edgelimit: unknown algorithm " .. tostring(ARGV[at])) end
  local r = check(KEYS[i], now, cost, tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3]))
  checks[i] = r
  admitted = admitted and r.ok
end

local commit = admitted and not peek
local out = {}
for i, r in ipairs(checks) do
  if commit then r.write() end
  local n = 4 * (i - 1)
  out[n + 1] = r.ok and 1 or 0
  out[n + 2] = math.max(0, commit and r.left or r.left_now)
  out[n + 3] = commit and r.reset or r.reset_now
  out[n + 4] = r.ok and 0 or r.retry
end
return out
