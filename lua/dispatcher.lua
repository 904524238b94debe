-- The dispatcher: checks every rule for one identifier, then commits all of them or none (the
-- contract with the algorithms is in prelude.lua).
--
-- ARGV[3 + 4n]  (optional, n rules) reserve: up to this many units more to take beside `cost`, for a
--               lease. Reserved units are taken like the cost, under every rule or none: at most half
--               of what the tightest rule has left after the cost (so the last units of a quota are
--               always decided here), at most `reserve`. Nothing is reserved on a peek or a denial.
--
-- No deadline. A decision its caller abandoned at its timeout may still reach Redis later (a stalled
-- hop delivering it) and be charged then, once: the transport never sends it twice. Checking a
-- deadline here would need Redis's clock (TIME: a billed command on every call) against the caller's
-- (the clock every script trusts; the two may disagree), or the caller times already stored (refusing,
-- then, the live decisions of a lagging isolate). What remains: with onError "allow" (the default) the
-- late charge matches a request that went through; with "deny" it is one unit too many per abandoned
-- decision, never an admission too many.
--
-- Returns 5 integers per rule: allowed (1/0), remaining, resetAt (epoch ms), retryAfter (ms; NEVER),
-- and where the units were counted: the start of their window (gcra: the TAT they hold, its reset; a
-- sliding log: their stamp; 0 when nothing was taken); then, when a reservation was asked for, the
-- number of units reserved. The one-rule scripts answer the same 5 for their rule. Remaining counts
-- every unit taken, reserved ones included. A rule that admits reports retryAfter 0, also when another
-- denies.
local peek = cost == 0
if peek then cost = 1 end
local reserve = A[3 + 4 * n]
if reserve then reserve = tonumber(reserve) end

-- One rule, the common case: no table but the answer.
if n == 1 then
  local check = algorithms[A[3]]
  if not check then error("edgelimit: unknown algorithm " .. tostring(A[3])) end
  -- the windows' unused third parameter is 0: not worth a tonumber()
  local p1, p2, p3 = tonumber(A[4]), tonumber(A[5]), A[6] == "0" and 0 or tonumber(A[6])
  local room, reset_at, retry_after, commit, s1, s2, s3, s4 = check(K[1], now, cost, p1, p2, p3)
  if not reserve then
    if cost > room then return { 0, math.max(0, room), reset_at, retry_after, 0 } end
    if peek then return { 1, room, reset_at, 0, 0 } end
    local ends, counted_in = commit(K[1], now, cost, p1, p2, p3, s1, s2, s3, s4)
    return { 1, room - cost, ends, 0, counted_in }
  end
  if cost > room then return { 0, math.max(0, room), reset_at, retry_after, 0, 0 } end
  if peek then return { 1, room, reset_at, 0, 0, 0 } end
  local reserved = math.min(reserve, math.floor((room - cost) / 2))
  local units = cost + reserved
  local ends, counted_in = commit(K[1], now, units, p1, p2, p3, s1, s2, s3, s4)
  return { 1, room - units, ends, 0, counted_in, reserved }
end

-- Several rules: check each (reads only), then commit every one or none.
local rules, admitted, reserved = {}, true, reserve or 0
for i = 1, n do
  local at = 3 + 4 * (i - 1)
  local p1, p2, p3 = tonumber(A[at + 1]), tonumber(A[at + 2]), tonumber(A[at + 3])
  local check = algorithms[A[at]]
  if not check then error("edgelimit: unknown algorithm " .. tostring(A[at])) end
  local room, reset_at, retry_after, commit, s1, s2, s3, s4 = check(K[i], now, cost, p1, p2, p3)
  rules[i] = {
    room = room, reset_at = reset_at, retry_after = retry_after,
    commit = commit, args = { p1, p2, p3, s1, s2, s3, s4 },
  }
  admitted = admitted and cost <= room
  if admitted then reserved = math.min(reserved, math.floor((room - cost) / 2)) end
end
local take = admitted and not peek
if not take then reserved = 0 end
local units = cost + reserved
local out = {}
for i, rule in ipairs(rules) do
  local n = 5 * (i - 1)
  if take then
    out[n + 1], out[n + 2], out[n + 4] = 1, rule.room - units, 0
    out[n + 3], out[n + 5] = rule.commit(K[i], now, units, unpack(rule.args, 1, 7))
  else
    local admits = cost <= rule.room
    out[n + 1] = admits and 1 or 0
    out[n + 2] = math.max(0, rule.room)
    out[n + 3] = rule.reset_at
    out[n + 4] = admits and 0 or rule.retry_after
    out[n + 5] = 0
  end
end
if reserve then out[#out + 1] = reserved end
return out
