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
-- State: "<A>:<B>". Commands: GET, then SET PX on commit.
--
-- A token bucket runs as GCRA: `capacity` tokens refilled continuously at `refillRate` per `interval`
-- is GCRA with limit = refillRate, period = interval, burst = capacity (tokens left = burst - d/period;
-- the Limiter sends it as such). A caller whose clock lags sees the bucket as it was at its own time
-- (fewer tokens), so it is only held back more, and the state never moves back.
-- One rule, cost 1..burst, no reservation takes the shortcut in lua/shortcut/gcra.lua.
if several or ARGV[3] == "gcra" then
  local function ceil_div(a, b)
    return math.floor((a + b - 1) / b)
  end

  -- TAT becomes now + (d + units*T); the key lives until TAT, when the state equals "no key".
  local function commit(key, now, units, limit, period, _, d)
    local next_d = d + units * period
    local whole = math.floor(next_d / limit)
    local ttl = ceil_div(next_d, limit)
    redis.call("SET", key, string.format("%d:%d", now + whole, next_d - whole * limit), "PX", ttl)
    return now + ttl
  end

algorithms.gcra = function(key, now, cost, limit, period, burst)
  local capacity = burst * period
  -- d: how far TAT lies ahead of now, in 1/limit ms (0 when the stream is idle). TAT never moves
  -- backwards: a caller whose clock lags sees a larger d and is only held back more.
  local d = 0
  local stored = redis.call("GET", key)
  if stored then
    local a, b = string.match(stored, "^(%-?%d+):(%d+)$")
    a, b = tonumber(a), tonumber(b)
    if a > now or (a == now and b > 0) then d = (a - now) * limit + b end
  end
  local room = math.floor((capacity - d) / period)
  local reset_at = now + ceil_div(d, limit)
  if cost > burst then return room, reset_at, NEVER end
  if cost > room then return room, reset_at, ceil_div(d + cost * period - capacity, limit) end
  return room, reset_at, 0, commit, d
end
end
