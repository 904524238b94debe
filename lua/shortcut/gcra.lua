-- GCRA's shortcut (see lua/algorithms/gcra.lua; token buckets run as GCRA too): one rule, cost
-- 1..burst, no reservation. The general layout (ARGV: now, cost, "gcra", limit, period, burst).
-- It answers one integer instead of the dispatcher's 4 (cheaper for Redis: see lua/prelude.lua):
-- d, how far TAT lies ahead of now in 1/limit ms, after the cost when admitted (d >= 1),
-- or -(d before) - 1 when denied. The Limiter derives remaining, resetAt and retryAfter from d.
-- Commands: GET, then SET PX when admitted.
if #KEYS == 1 and ARGV[3] == "gcra" and not ARGV[7] then
  local cost = ARGV[2] == "1" and 1 or tonumber(ARGV[2])
  local limit, period, burst = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
  if cost >= 1 and cost <= burst then
    local now = tonumber(ARGV[1], 16)
    local key = KEYS[1]
    local d = 0
    local stored = redis.call("GET", key)
    if stored then
      local a, b = string.match(stored, "^(%-?%d+):(%d+)$")
      a, b = tonumber(a), tonumber(b)
      if a > now or (a == now and b > 0) then d = (a - now) * limit + b end
    end
    local next_d = d + cost * period
    if next_d > burst * period then return -d - 1 end
    local whole = math.floor(next_d / limit)
    -- numbers handed to redis.call() are formatted with "%.17g", dearer than "%d"
    redis.call("SET", key, string.format("%d:%d", now + whole, next_d - whole * limit),
      "PX", string.format("%d", math.floor((next_d + limit - 1) / limit)))
    return next_d
  end
end
