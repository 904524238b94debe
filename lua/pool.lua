-- A regional pool: units of one identifier already consumed in the home database, held in a database
-- near a region's isolates and shared by all of them (docs/regions.md). No unit is ever created here:
-- the pool only hands out, or gives back for a refund at home, units that home took first.
--
-- KEYS[1]  the pool's key (under the identifier's hash tag), a hash:
--            u  units held            e  epoch ms (the caller's clock) from which they are no longer handed out
--            w  per rule, the start of the window the units were counted in ("s1 s2 ...")
--            r  the reservation they came from, "<at> <taken> <w>": when home counted it (ms, its `now`) and
--               how many of its units are held or lent here (a gcra refund is bounded by them: lua/refund.lua);
--               read only beside the w it names (a script that kept none may have written w since)
--            s  home's last answer, per rule: remaining (the pool's units left out) and resetAt ("r1 t1 r2 t2 ...")
--            h  the least remaining of s
--            a  when an isolate was told to reserve a top-up at home (one at a time per ttl)
--            ds, dc, dp  the region's demand: start of the current bucket (ttl ms long), units asked in it and in the one before
-- ARGV[1]  now, epoch ms, from the caller's clock, in hexadecimal
-- ARGV[2]  "take", "put", "drain" or "free"
-- ARGV[3]  ttl: ms a deposit may be handed out for; also the span over which demand is measured
-- ARGV[4]  max: most units the pool holds
--
-- take, ARGV[5] cost (0 peeks), ARGV[6] extra: units for the caller's own lease, beside the cost. When
-- the pool holds the cost (at least 1) and is not past `e`, takes it and up to `extra` more (counted as
-- demand with it) and answers { 1, units left, top-up, s, extra taken, w, at, taken, e }: top-up > 0 asks the
-- caller to reserve that many at home, plus the top-up decision's own unit (the pool is low); the extra
-- units come from the reservation of `at`, lent `taken` of its units (their part, which the pool no
-- longer counts: two holders of one reservation's units each bounded by all of them could give back
-- more than they hold). Else answers { 0, want, leftover, w, at, taken }: want > 0 asks the caller to
-- reserve that many at home beside its decision; leftover > 0 are units of a pool past `e`, taken out
-- here (now nobody else's) for the caller to refund at home, in the windows w, as reserved at `at`.
--
-- put, ARGV[5] units, ARGV[6] e, ARGV[7] w, ARGV[8] s, ARGV[9] h, ARGV[10] "<at> <taken>": deposits
-- units home reserved at `at` (taken: how many of that reservation's units are deposited). Units left
-- from a pool past its `e` or counted in other windows are taken out for a refund; what would take
-- the pool past max is too. Units kept beside others of the same windows count from the earlier
-- reservation (a refund then gives back at most what its units still hold: less, never more).
-- Answers { units held, leftover, old w, excess, at, taken } (excess: in the new w, as deposited;
-- at and taken: the leftover's reservation).
--
-- drain: takes out every unit held, expired or not (an isolate going away gives back the pools it
-- filled). Answers { 0, 0, units taken out, w, at, taken } for the caller to refund at home, in the
-- windows w, as reserved at `at`.
--
-- A reservation's `at` 0 means not known (written by a pool script that kept none): a refund is then
-- bounded by the units' TAT alone. `at` known with `taken` 0: its units were all lent, and what is
-- left is bounded by the refunds given back since `at` (lua/refund.lua).
--
-- free, ARGV[5] the time a take told its caller to reserve: that reservation brought nothing (home
-- denied, failed, or had no units to spare), so another isolate may ask now. Answers 0.
--
-- Every write sets the key's expiry to 3 ttl (the deposit's `e` is at most a ttl ahead): a pool nobody
-- asks again disappears with its units, which stay consumed at home until home's state expires.
local function int(x) return string.format("%d", x) end
local key = KEYS[1]
local now = tonumber(ARGV[1], 16)
local ttl = tonumber(ARGV[3])
local max = tonumber(ARGV[4])
local f = redis.call("HMGET", key, "u", "e", "w", "s", "h", "a", "ds", "dc", "dp", "r")
local units = tonumber(f[1]) or 0
local expires = tonumber(f[2]) or 0
local windows = f[3] or ""
-- the reservation of the units held (0, 0: not known)
local at, taken, of = string.match(f[10] or "", "^(%d+) (%d+) (.*)$")
if at == nil or of ~= windows then at, taken = "0", "0" end
at, taken = tonumber(at), tonumber(taken)
local asked = tonumber(f[6])
-- one top-up at a time: another isolate asked less than a ttl ago (a clock behind it counts as recent)
local asking = asked ~= nil and now - asked < ttl

if ARGV[2] == "free" then
  if asked ~= nil and asked == tonumber(ARGV[5]) then redis.call("HDEL", key, "a") end
  return 0
end

if ARGV[2] == "drain" then
  if units > 0 then redis.call("HSET", key, "u", "0") end
  return { 0, 0, units, windows, at, taken }
end

if ARGV[2] == "put" then
  local add = tonumber(ARGV[5])
  local w = ARGV[7]
  local new_at, new_taken = string.match(ARGV[10] or "0 0", "^(%d+) (%d+)$")
  new_at, new_taken = tonumber(new_at), tonumber(new_taken)
  local leftover, old, old_at, old_taken = 0, "", 0, 0
  if units > 0 and (now >= expires or windows ~= w) then
    leftover, old, old_at, old_taken, units = units, windows, at, taken, 0
  end
  local keep = math.min(add, math.max(0, max - units))
  -- the units kept count from the earlier of the two reservations (the lease tier's rule); one not
  -- known leaves them not known. The excess goes back as this deposit's (excess of its taken).
  local kept_taken = math.max(0, new_taken - (add - keep))
  if units == 0 or (new_at > 0 and new_at < at) then
    at, taken = new_at, kept_taken
  elseif new_at == 0 then
    at, taken = 0, 0
  end
  units = units + keep
  redis.call("HSET", key, "u", int(units), "e", ARGV[6], "w", w, "s", ARGV[8], "h", ARGV[9],
    "r", int(at) .. " " .. int(taken) .. " " .. w)
  redis.call("HDEL", key, "a")
  redis.call("PEXPIRE", key, int(3 * ttl))
  return { units, leftover, old, add - keep, old_at, old_taken }
end

-- The regional tier's demand estimate and sizing: src/engine/tier.ts's (estimate, size, low, topUp)
-- over the region's demand, stated again here because every isolate of the region counts into one
-- estimate and only this script can tell one isolate at a time to reserve (test/engine/tier.test.ts
-- checks the two agree). Demand over the last ttl in whole units, from two buckets of ttl ms (the older
-- weighted by its overlap), as it stood before this decision.
local cost = tonumber(ARGV[5])
local extra = tonumber(ARGV[6]) or 0
local start, current, previous = tonumber(f[7]) or now, tonumber(f[8]) or 0, tonumber(f[9]) or 0
local elapsed = now - start
if elapsed >= 2 * ttl then
  start, current, previous = now, 0, 0
elseif elapsed >= ttl then
  start, current, previous = start + ttl, 0, current
end
local into = math.min(ttl, math.max(0, now - start))
local demand = math.floor((previous * (ttl - into)) / ttl) + current

if units >= math.max(cost, 1) and now < expires then
  extra = math.min(extra, units - cost)
  units = units - cost - extra
  current = current + cost + extra
  local lent = math.min(extra, taken)
  local top_up = 0
  -- tier.ts's topUp: at or under low, about an eighth of a ttl's demand (at most a quarter of max),
  -- about a ttl's demand less what is held and the own unit. The top-up decision's own unit skips the
  -- limiter script's half rule, so a top-up is asked for only while home, as of the last deposit, had
  -- at least twice what it takes.
  local low = math.min(math.floor(max / 4), math.ceil(demand / 8))
  if units <= low and not asking and cost > 0 then
    top_up = math.min(max, demand) - units - 1
    if top_up < 1 or (tonumber(f[5]) or 0) < 2 * (top_up + 1) then top_up = 0 end
  end
  redis.call("HSET", key, "u", int(units), "ds", int(start), "dc", int(current), "dp", int(previous))
  if lent > 0 then redis.call("HSET", key, "r", int(at) .. " " .. int(taken - lent) .. " " .. windows) end
  if top_up > 0 then redis.call("HSET", key, "a", int(now)) end
  redis.call("PEXPIRE", key, int(3 * ttl))
  return { 1, units, top_up, f[4] or "", extra, windows, at, lent, expires }
end

current = current + cost

local leftover, old, old_at, old_taken = 0, "", 0, 0
if units > 0 and now >= expires then
  leftover, old, old_at, old_taken, units = units, windows, at, taken, 0
end
local want = 0
if not asking and cost > 0 then want = math.min(max, demand) end
redis.call("HSET", key, "u", int(units), "ds", int(start), "dc", int(current), "dp", int(previous))
if want > 0 then redis.call("HSET", key, "a", int(now)) end
redis.call("PEXPIRE", key, int(3 * ttl))
return { 0, want, leftover, old, old_at, old_taken }
