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
algorithms.gcra = function(key, now, cost, limit, period, burst)
  local capacity = burst * period
  -- d: how far TAT lies ahead of now, in 1/limit ms (0 when the stream is idle)
  local d = 0
  local stored = redis.call("GET", key)
  if stored then
    local a, b = string.match(stored, "^(%-?%d+):(%d+)$")
    a, b = tonumber(a), tonumber(b)
    if a > now or (a == now and b > 0) then d = (a - now) * limit + b end
  end
  local r = {
    limit = burst,
    left_now = math.floor((capacity - d) / period),
    reset_now = now + ceil_div(d, limit),
  }
  if cost > burst then
    r.ok, r.retry = false, NEVER
    return r
  end
  local next_d = d + cost * period
  if next_d > capacity then
    r.ok, r.retry = false, ceil_div(next_d - capacity, limit)
    return r
  end
  r.ok = true
  r.left = math.floor((capacity - next_d) / period)
  r.reset = now + ceil_div(next_d, limit)
  -- TAT never moves backwards: a caller whose clock lags sees a larger d and is only held back more.
  local whole = math.floor(next_d / limit)
  r.write = function()
    redis.call("SET", key, int(now + whole) .. ":" .. int(next_d - whole * limit), "PX", ceil_div(next_d, limit))
  end
  return r
end
