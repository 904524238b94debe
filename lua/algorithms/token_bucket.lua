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
  local left_now = math.floor(tokens / interval)
  local reset_now = at + ceil_div(full - tokens, refill)
  if cost > capacity then return false, NEVER, left_now, reset_now end
  local need = cost * interval
  if need > tokens then return false, (at - now) + ceil_div(need - tokens, refill), left_now, reset_now end
  local left = tokens - need
  local refill_ms = ceil_div(full - left, refill)
  -- once full again the state equals "no key", so it lives exactly as long as the refill takes
  return true, 0, left_now, reset_now, math.floor(left / interval), at + refill_ms,
    set_px, int(left) .. ":" .. int(at), math.max(1, at - now + refill_ms)
end
