-- Token bucket: holds up to `capacity` tokens and refills continuously at `refill` tokens per
-- `interval` ms; a request of n units takes n tokens. O(1) memory, exact.
--
-- Fractions of a token are carried, not rounded to whole steps: the state counts tokens in units of
-- 1/interval token ("scaled"), so a bucket earns exactly `refill` scaled units per ms and every
-- comparison is integer arithmetic. State: "<scaled tokens>:<ms of last refill>". The refill time is
-- never moved backwards, so a caller whose clock lags refills nothing.
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
  local r = {
    limit = capacity,
    left_now = math.floor(tokens / interval),
    reset_now = at + ceil_div(full - tokens, refill),
  }
  if cost > capacity then
    r.ok, r.retry = false, NEVER
    return r
  end
  local need = cost * interval
  if need > tokens then
    r.ok, r.retry = false, (at - now) + ceil_div(need - tokens, refill)
    return r
  end
  local left = tokens - need
  local refill_ms = ceil_div(full - left, refill)
  r.ok = true
  r.left = math.floor(left / interval)
  r.reset = at + refill_ms
  -- once full again the state equals "no key", so it lives exactly as long as the refill takes
  r.write = function()
    redis.call("SET", key, int(left) .. ":" .. int(at), "PX", math.max(1, at - now + refill_ms))
  end
  return r
end
