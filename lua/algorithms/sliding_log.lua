-- Sliding log: at most `limit` units in any `window` ms, exact, one sorted-set entry per unit
-- admitted in the last `window` ms (so O(limit) memory). An entry stamped t counts while now < t + window.
--
-- Entries are stamped with max(now, newest stamp), so a caller whose clock lags can neither expire
-- entries early nor stamp its own to expire early. Members are "<stamp>:<n>" with n above the number
-- of entries in the window: at one stamp that number only grows, so members never collide, however
-- many units arrive in the same millisecond. Expired entries are trimmed only when a request is
-- admitted, so a denial or a peek writes nothing.
-- Commands: ZRANGE (newest) and ZCOUNT; a denial adds ZRANGEBYSCORE (when it could pass), an
-- admission ZREMRANGEBYSCORE, ZADD (one per ZADD_CHUNK units) and PEXPIRE.
-- It has no one-rule script and no refund: the check is its only path (sliding logs are never leased).

-- #state
local ZADD_CHUNK = 1000

-- #check
-- Returns when the last entry leaves the window (the reset) and the window counted in (none: 0).
local function commit(key, now, units, _, window, _, stamp, count)
  redis.call("ZREMRANGEBYSCORE", key, "-inf", stamp - window)
  -- unpack() fails past a few thousand values, and a write must not fail after others were made
  -- (a script error does not undo them): add at most ZADD_CHUNK entries per call.
  for first = 1, units, ZADD_CHUNK do
    local entries = {}
    for i = first, math.min(units, first + ZADD_CHUNK - 1) do
      entries[#entries + 1] = stamp
      entries[#entries + 1] = string.format("%d:%d", stamp, count + i)
    end
    redis.call("ZADD", key, unpack(entries))
  end
  redis.call("PEXPIRE", key, stamp + window - now)
  return stamp + window, 0
end

algorithms.slidingLog = function(key, now, cost, limit, window)
  local newest = redis.call("ZRANGE", key, -1, -1, "WITHSCORES")[2]
  local stamp = now
  if newest then stamp = math.max(now, tonumber(newest)) end
  local floor = string.format("(%d", stamp - window)
  local count = redis.call("ZCOUNT", key, floor, "+inf")
  local room = limit - count
  -- back to the full limit once the newest entry leaves the window
  local reset_at = count > 0 and tonumber(newest) + window or now
  if cost > limit then return room, reset_at, NEVER end
  if cost > room then
    -- wait until the excess-th oldest entry in the window leaves it
    local excess = count + cost - limit
    local oldest = redis.call("ZRANGEBYSCORE", key, floor, "+inf", "WITHSCORES", "LIMIT", excess - 1, 1)[2]
    return room, reset_at, tonumber(oldest) + window - now
  end
  return room, reset_at, 0, commit, stamp, count
end
