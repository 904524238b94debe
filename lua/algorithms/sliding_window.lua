-- Sliding window (estimate): at most `limit` units in any `window` ms, estimated from two counters,
-- the current aligned window and the previous one. O(1) memory.
--
--   estimate(t) = previous * (window - elapsed) / window + current,   elapsed = t - current window start
--
-- It assumes the previous window's traffic was spread evenly. That is exact for even traffic; in the
-- worst case (the whole previous window's traffic at its very end) a window of `window` ms that
-- straddles the boundary can hold up to 2*limit - 1 units. All comparisons are multiplied
-- through by `window`, so they are integer arithmetic.
--
-- State, when limit < 2^25 (the usual case): one integer, stamp * 2^50 + current * 2^25 + previous,
-- stamp = (window index mod 4) + 1, so a later unit in the same window is one INCRBY and nothing is
-- formatted or matched. Commands: GET, then INCRBY on commit (SET PX when a window starts; the peer's
-- two keys take GET, GET, INCRBY, PEXPIRE). The key lives until its window has faded out, a window
-- after it ends, so a stored stamp is this window's, the previous one's, or (a lagging caller) the
-- next one's; mod 4 keeps the one before the previous apart from the next (clocks must agree within
-- a window). A larger limit keeps the text state "<current start>:<current>:<previous>" (GET, SET PX).
local PACK = 2 ^ 25
local STAMP = 2 ^ 50
if several or ARGV[3] == "slidingWindow" then
  -- the key matters until the current window has faded out entirely, a window after it ends.
  -- current > 0: the stored window is the one counted in (packed: add to it).
  local function commit(key, now, units, limit, window, _, start, current, previous)
    local fades = start + 2 * window
    if limit < PACK then
      if current > 0 then
        redis.call("INCRBY", key, units * PACK)
      else
        local stamp = (start / window % 4 + 1) * STAMP
        redis.call("SET", key, stamp + units * PACK + previous, "PX", fades - now)
      end
    else
      redis.call("SET", key, string.format("%d:%d:%d", start, current + units, previous), "PX", fades - now)
    end
    return fades
  end

algorithms.slidingWindow = function(key, now, cost, limit, window)
  local start = now - now % window
  local current, previous = 0, 0
  local stored = redis.call("GET", key)
  if stored then
    if limit < PACK then
      -- only what INCRBY takes (the commit's INCRBY must not fail midway, after other rules)
      local value = tonumber(stored)
      if value and string.format("%d", value) == stored then
        local index = start / window
        local stamp = math.floor(value / STAMP)
        local counts = value - stamp * STAMP
        local c = math.floor(counts / PACK)
        if stamp == index % 4 + 1 then
          current, previous = c, counts - c * PACK
        elseif stamp == (index + 1) % 4 + 1 then
          -- a lagging clock: count in the stored (newer) window, from its start
          start, current, previous = start + window, c, counts - c * PACK
        elseif stamp == (index + 3) % 4 + 1 then
          previous = c
        end
      end
    else
      local s, c, p = string.match(stored, "^(%-?%d+):(%d+):(%d+)$")
      if s then
        s, c, p = tonumber(s), tonumber(c), tonumber(p)
        if s >= start then
          -- same window, or a lagging clock: count in the stored (newer) window, from its start
          start, current, previous = s, c, p
        elseif s == start - window then
          previous = c
        end
      end
    end
  end
  -- A lagging caller (now before the stored window's start) weighs the previous window fully, as at
  -- the start: never more than its whole count.
  local elapsed = math.max(0, now - start)
  local used = previous * (window - elapsed) + current * window
  local budget = limit * window
  local room = math.floor((budget - used) / window)
  -- back to the full limit once every counted unit has faded out
  local reset_at = current > 0 and start + 2 * window or previous > 0 and start + window or now
  if cost > limit then return room, reset_at, NEVER end
  if cost > room then
    if current + cost <= limit then
      -- the previous window's weight has to fade: smallest e with previous*(window-e) <= room left,
      -- reached at start + e (counted from now, not from the clamped elapsed: a lagging caller waits
      -- for its lag as well)
      local fade = window - math.floor((limit - current - cost) * window / previous)
      return room, reset_at, math.max(1, start + fade - now)
    end
    -- only the next window can admit it, once this window's count has faded enough
    local fade = window - math.floor((limit - cost) * window / current)
    return room, reset_at, (start + window - now) + fade
  end
  return room, reset_at, 0, commit, start, current, previous
end
end
