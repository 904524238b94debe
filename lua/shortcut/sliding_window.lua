-- The sliding window's shortcut (see lua/algorithms/sliding_window.lua): one rule, cost 1..limit, a
-- limit below 2^25 (the packed state), no reservation. The general layout (ARGV: now, cost,
-- "slidingWindow", limit, window, 0). It answers one integer instead of the dispatcher's 4:
--   ((current * 2^25 + previous) * 2 + newer), current after the cost, when admitted;
--   -((current * 2^25 + previous) * 2 + newer) - 1, the counts as they stand, when denied;
-- newer is 1 when a lagging caller was counted in the next window. The Limiter derives remaining,
-- resetAt and retryAfter from them. Commands: GET, then INCRBY (SET PX in a new window) when admitted.
if #KEYS == 1 and ARGV[3] == "slidingWindow" and not ARGV[7] then
  local cost = ARGV[2] == "1" and 1 or tonumber(ARGV[2])
  local limit = tonumber(ARGV[4])
  if cost >= 1 and cost <= limit and limit < 2 ^ 25 then
    local now, window = tonumber(ARGV[1], 16), tonumber(ARGV[5])
    local key = KEYS[1]
    local start = now - now % window
    local index = start / window
    local current, previous, newer = 0, 0, 0
    local value = tonumber(redis.call("GET", key))
    if value then
      local stamp = math.floor(value / 2 ^ 50)
      local counts = value - stamp * 2 ^ 50
      local c = math.floor(counts / 2 ^ 25)
      if stamp == index % 4 + 1 then
        current, previous = c, counts - c * 2 ^ 25
      elseif stamp == (index + 1) % 4 + 1 then
        start, newer, current, previous = start + window, 1, c, counts - c * 2 ^ 25
      elseif stamp == (index + 3) % 4 + 1 then
        previous = c
      end
    end
    local elapsed = now > start and now - start or 0
    if previous * (window - elapsed) + (current + cost) * window > limit * window then
      return -((current * 2 ^ 25 + previous) * 2 + newer) - 1
    end
    if current > 0 then
      redis.call("INCRBY", key, cost == 1 and "33554432" or string.format("%d", cost * 2 ^ 25))
    else
      local stamp = (start / window % 4 + 1) * 2 ^ 50
      redis.call("SET", key, string.format("%d", stamp + cost * 2 ^ 25 + previous),
        "PX", string.format("%d", start + 2 * window - now))
    end
    return ((current + cost) * 2 ^ 25 + previous) * 2 + newer
  end
end
