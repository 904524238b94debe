-- Sliding log: at most `limit` units in any `window` ms, exact, one sorted-set entry per unit
-- admitted in the last `window` ms (so O(limit) memory). An entry stamped t counts while now < t + window.
--
-- Entries are stamped with max(now, newest stamp), so a caller whose clock lags can neither expire
-- entries early nor stamp its own to expire early. Members are "<stamp>:<n>" with n above the number
-- of entries in the window: at one stamp that number only grows, so members never collide, however
-- many units arrive in the same millisecond (a settle that removes entries can lower it: an n already
-- taken is skipped, ZADD answering how many members were new). Expired entries are trimmed only when
-- a request is admitted, so a denial or a peek writes nothing.
-- Commands: ZRANGE (newest) and ZCOUNT; a denial adds ZRANGEBYSCORE (when it could pass), an
-- admission ZREMRANGEBYSCORE, ZADD (one per ZADD_CHUNK units) and PEXPIRE.
-- It has no one-rule script and no refund: the check is its only path (sliding logs are never leased).
-- A settle (#settle) removes a decision's own entries, or adds a debt's.

-- #state
local ZADD_CHUNK = 1000

-- The log as a caller at `now` sees it: its newest stamp (nil when empty), the stamp its units would
-- get, the exclusive lower bound of the window and the number of entries in it.
local function stamped(key, now, window)
  local newest = redis.call("ZRANGE", key, -1, -1, "WITHSCORES")[2]
  local stamp = now
  if newest then stamp = math.max(now, tonumber(newest)) end
  local floor = string.format("(%d", stamp - window)
  return newest, stamp, floor, redis.call("ZCOUNT", key, floor, "+inf")
end

-- Stamps `units` more entries (the check's commit, and a settle's debt). Returns when the last entry
-- leaves the window (the reset) and, as where the units were counted, their stamp (a settle's).
local function commit(key, now, units, _, window, _, stamp, count)
  redis.call("ZREMRANGEBYSCORE", key, "-inf", stamp - window)
  -- unpack() fails past a few thousand values, and a write must not fail after others were made
  -- (a script error does not undo them): add at most ZADD_CHUNK entries per call.
  local added, n = 0, count
  while added < units do
    local entries = {}
    for _ = 1, math.min(units - added, ZADD_CHUNK) do
      n = n + 1
      entries[#entries + 1] = stamp
      entries[#entries + 1] = string.format("%d:%d", stamp, n)
    end
    added = added + redis.call("ZADD", key, unpack(entries))
  end
  redis.call("PEXPIRE", key, stamp + window - now)
  return stamp + window, stamp
end

-- #check
algorithms.slidingLog = function(key, now, cost, limit, window)
  local newest, stamp, floor, count = stamped(key, now, window)
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

-- #settle
-- Below the reservation: the last cost - actual of the decision's own entries go ("<stamp>:<n>",
-- n = mark + actual + 1 .. mark + cost, mark the count before them), those still in the log (a
-- decision that had to skip numbers taken, after an earlier settle at its stamp, removes what of them
-- it finds). Above:
-- the extra is stamped like an admission, past the limit if need be (a debt: later decisions wait until
-- it leaves the window), up to DEBT_CAP times the limit in the window (lua/settle.lua), which bounds the log's memory.
settle.slidingLog = function(key, now, cost, actual, limit, window, _, stamp, mark)
  local removed = 0
  if actual < cost then
    for first = mark + actual + 1, mark + cost, ZADD_CHUNK do
      local members = {}
      for n = first, math.min(mark + cost, first + ZADD_CHUNK - 1) do
        members[#members + 1] = string.format("%d:%d", stamp, n)
      end
      removed = removed + redis.call("ZREM", key, unpack(members))
    end
    return removed > 0
  end
  local _, at, _, count = stamped(key, now, window)
  local units = math.min(actual - cost, DEBT_CAP * limit - count)
  if units <= 0 then return false end
  commit(key, now, units, 0, window, 0, at, count)
  return true
end
