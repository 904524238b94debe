-- GCRA (generic cell rate algorithm): `limit` per `period` ms, up to `burst` at once. O(1) memory, exact.
--
-- The math, with time in ms:
--   emission interval   T   = period / limit        (one unit earns back after T)
--   tolerance           tau = T * (burst - 1)        (how far ahead of schedule a caller may run)
--   theoretical arrival TAT = when the stream would be back to empty if it sent at exactly one unit per T
-- A request of n units at time t is admitted iff  max(TAT, t) + n*T - t <= tau + T = burst*T,
-- and then TAT becomes max(TAT, t) + n*T. Nothing else is stored.
--
-- T is a fraction (1000/3 ms, ...), so TAT is kept exactly as two integers: TAT = A + B/limit ms,
-- with 0 <= B < limit. In units of 1/limit ms, T is `period` and burst*T is `burst*period`, so every
-- comparison below is integer arithmetic, exact for any realistic limit.
-- State: "<A>:<B>", kept until TAT (when it equals "no key"). Commands: GET, then SET PX on commit.
--
-- A token bucket runs as GCRA: `capacity` tokens refilled continuously at `refillRate` per `interval`
-- is GCRA with limit = refillRate, period = interval, burst = capacity (tokens left = burst - d/period).
-- A caller whose clock lags sees the bucket as it was at its own time (fewer tokens), so it is only
-- held back more, and the state never moves back.
--
-- This file is the algorithm's one source; scripts/build-lua.mjs cuts it at its `-- #` lines:
-- state (shared by every path), check (the limiter script), one-rule (a script of its own), refund.

-- #state
-- The state at `now`: d, how far TAT lies ahead of now, in 1/limit ms (0 when the stream is idle; false
-- when there is no state), and the whole units the rule could take, the room left under burst*T. A
-- caller whose clock lags sees a larger d and is only held back more.
local function read(key, now, limit, period, burst)
  local stored = redis.call("GET", key)
  local d = 0
  if stored then
    local a, b = string.match(stored, "^(%-?%d+):(%d+)$")
    a, b = tonumber(a), tonumber(b)
    if a > now or (a == now and b > 0) then d = (a - now) * limit + b end
  end
  return stored and d, math.floor((burst * period - d) / period)
end

-- Stores TAT = now + d; returns when the stream is back to idle (the reset).
local function write(key, now, limit, d)
  local whole = math.floor(d / limit)
  local ttl = math.floor((d + limit - 1) / limit)
  redis.call("SET", key, string.format("%d:%d", now + whole, d - whole * limit), "PX", string.format("%d", ttl))
  return now + ttl
end

-- #check
local function ceil_div(a, b)
  return math.floor((a + b - 1) / b)
end

-- Takes `units` more: TAT moves on by units*T. Returns the reset and the window counted in (none: 0).
local function commit(key, now, units, limit, period, _, d)
  return write(key, now, limit, d + units * period), 0
end

algorithms.gcra = function(key, now, cost, limit, period, burst)
  local d, room = read(key, now, limit, period, burst)
  d = d or 0
  local reset_at = now + ceil_div(d, limit)
  if cost > burst then return room, reset_at, NEVER end
  if cost > room then return room, reset_at, ceil_div(d + cost * period - burst * period, limit) end
  return room, reset_at, 0, commit, d
end

-- #one-rule
-- One rule, cost 1..burst, no reservation. ARGV: now (hexadecimal), cost, limit, period, burst.
-- Answers one integer: d after the cost when admitted (d >= 1), or -(d before) - 1 when denied.
local now = tonumber(ARGV[1], 16)
local cost = ARGV[2] == "1" and 1 or tonumber(ARGV[2])
local limit, period, burst = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local key = KEYS[1]
local d, room = read(key, now, limit, period, burst)
d = d or 0
if cost > room then return -d - 1 end
d = d + cost * period
write(key, now, limit, d)
return d

-- #refund
-- TAT moves back by units*T; back at idle, the key goes (the same as no state at all).
refund.gcra = function(key, now, units, limit, period, burst)
  local d = read(key, now, limit, period, burst)
  if not d then return false end
  d = d - units * period
  if d <= 0 then
    redis.call("DEL", key)
  else
    write(key, now, limit, d)
  end
  return true
end
