-- Sliding log: at most `limit` units in any `window` ms, exact, one sorted-set entry per unit
-- admitted in the last `window` ms (so O(limit) memory). An entry stamped t counts while now < t + window.
--
-- Entries are stamped with max(now, newest stamp), so a caller whose clock lags can neither expire
-- entries early nor stamp its own to expire early. Members are "<stamp>:<n>" with n above the number
-- of entries in the window: at one stamp that number only grows, so members never collide, however
-- many units arrive in the same millisecond. Expired entries are trimmed only when a request is
-- admitted, so a denial or a peek writes nothing.
local function log_write(key, now, stamp, count, cost_window)
  local cost, window = cost_window[1], cost_window[2]
  redis.call("ZREMRANGEBYSCORE", key, "-inf", stamp - window)
  -- unpack() fails past a few thousand values, and a write must not fail after others were made
  -- (a script error does not undo them): add at most ZADD_CHUNK entries per call.
  local prefix = int(stamp) .. ":"
  for first = 1, cost, ZADD_CHUNK do
    local entries = {}
    for i = first, math.min(cost, first + ZADD_CHUNK - 1) do
      entries[#entries + 1] = stamp
      entries[#entries + 1] = prefix .. int(count + i)
    end
    redis.call("ZADD", key, unpack(entries))
  end
  redis.call("PEXPIRE", key, stamp + window - now)
end

algorithms.slidingLog = function(key, now, cost, limit, window)
  local newest = redis.call("ZRANGE", key, -1, -1, "WITHSCORES")[2]
  local stamp = now
  if newest then stamp = math.max(now, tonumber(newest)) end
  local floor = "(" .. int(stamp - window)
  local count = redis.call("ZCOUNT", key, floor, "+inf")
  -- back to the full limit once the newest entry leaves the window
  local reset_now = count > 0 and tonumber(newest) + window or now
  if cost > limit then return false, NEVER, limit - count, reset_now end
  local excess = count + cost - limit
  if excess > 0 then
    -- wait until the excess-th oldest entry in the window leaves it
    local oldest = redis.call("ZRANGEBYSCORE", key, floor, "+inf", "WITHSCORES", "LIMIT", excess - 1, 1)[2]
    return false, tonumber(oldest) + window - now, limit - count, reset_now
  end
  return true, 0, limit - count, reset_now, limit - count - cost, stamp + window,
    log_write, stamp, count, { cost, window }
end
