-- Sliding window (estimate): at most `limit` units in any `window` ms, estimated from two counters,
-- the current aligned window and the previous one. O(1) memory.
--
--   estimate(t) = previous * (window - elapsed) / window + current,   elapsed = t - current window start
--
-- It assumes the previous window's traffic was spread evenly. That is exact for even traffic; in the
-- worst case (the whole previous window's traffic at its very end) a window of `window` ms that
-- straddles the boundary can hold up to 2*limit - 1 units. All comparisons are multiplied
-- through by `window`, so they are integer arithmetic. State: "<current start>:<current>:<previous>".
algorithms.slidingWindow = function(key, now, cost, limit, window)
  local start = now - now % window
  local current, previous = 0, 0
  local stored = redis.call("GET", key)
  if stored then
    local s, c, p = string.match(stored, "^(%-?%d+):(%d+):(%d+)$")
    s, c, p = tonumber(s), tonumber(c), tonumber(p)
    if s >= start then
      -- same window, or a lagging clock: count in the stored (newer) window, from its start
      start, current, previous = s, c, p
    elseif s == start - window then
      previous = c
    end
  end
  local elapsed = math.max(0, now - start)
  local used = previous * (window - elapsed) + current * window
  local budget = limit * window
  local left_now = math.max(0, math.floor((budget - used) / window))
  -- back to the full limit once every counted unit has faded out
  local reset_now = current > 0 and start + 2 * window or previous > 0 and start + window or now
  if cost > limit then return false, NEVER, left_now, reset_now end
  if used + cost * window > budget then
    if current + cost <= limit then
      -- the previous window's weight has to fade: smallest e with previous*(window-e) <= room
      local fade = window - math.floor((limit - current - cost) * window / previous)
      return false, math.max(1, fade - elapsed), left_now, reset_now
    end
    -- only the next window can admit it, once this window's count has faded enough
    local fade = window - math.floor((limit - cost) * window / current)
    return false, (start + window - now) + fade, left_now, reset_now
  end
  return true, 0, left_now, reset_now, math.floor((budget - used - cost * window) / window), start + 2 * window,
    set_px, int(start) .. ":" .. int(current + cost) .. ":" .. int(previous), start + 2 * window - now
end
