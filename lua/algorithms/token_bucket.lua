-- Token bucket: holds up to `capacity` tokens and refills continuously at `refill` tokens per
-- `interval` ms; a request of n units takes n tokens. O(1) memory, exact.
--
-- Fractions of a token are carried, not rounded to whole steps: the state counts tokens in units of
-- 1/interval token ("scaled"), so a bucket earns exactly `refill` scaled units per ms and every
-- comparison is integer arithmetic. State: "<scaled tokens>:<ms of last refill>". The refill time is
-- never moved backwards, so a caller whose clock lags refills nothing. Commands: GET, then SET PX.
if several or ARGV[3] == "tokenBucket" then
  local function ceil_div(a, b)
    return math.floor((a + b - 1) / b)
  end

  -- once full again the state equals "no key", so it lives exactly as long as the refill takes
  local function commit(key, now, units, capacity, refill, interval, tokens, at)
    local left = tokens - units * interval
    local refill_ms = ceil_div(capacity * interval - left, refill)
    redis.call("SET", key, string.format("%d:%d", left, at), "PX", math.max(1, at - now + refill_ms))
    return at + refill_ms
  end

algorithms.tokenBucket = function(key, now, cost, capacity, refill, interval)
  local full = capacity * interval
  local tokens, at = full, now
  local stored = redis.call("GET", key)
  if stored then
    local t, a = string.match(stored, "^(%d+):(%-?%d+)$")
    tokens, at = tonumber(t), tonumber(a)
    if now > at then
      tokens = math.min(full, tokens + (now - at) * refill)
      at = now
    end
  end
  local room = math.floor(tokens / interval)
  local reset_at = at + ceil_div(full - tokens, refill)
  if cost > capacity then return room, reset_at, NEVER end
  if cost > room then return room, reset_at, (at - now) + ceil_div(cost * interval - tokens, refill) end
  return room, reset_at, 0, commit, tokens, at
end
end
