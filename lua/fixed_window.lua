-- Fixed window: at most `limit` units per window of `window` ms, windows aligned to the epoch.
-- O(1) memory, exact for its own definition (up to 2*limit can pass around a window boundary).
-- State: "<window start>:<count>". A caller whose clock lags into the previous window is counted in
-- the newer stored window, so it can never reopen an old one.
algorithms.fixedWindow = function(key, now, cost, limit, window)
  local start = now - now % window
  local count = 0
  local stored = redis.call("GET", key)
  if stored then
    local s, c = string.match(stored, "^(%-?%d+):(%d+)$")
    s, c = tonumber(s), tonumber(c)
    if s >= start then start, count = s, c end
  end
  local ends = start + window
  local r = { limit = limit, left_now = limit - count, reset_now = count > 0 and ends or now }
  if cost > limit then
    r.ok, r.retry = false, NEVER
    return r
  end
  if count + cost > limit then
    r.ok, r.retry = false, ends - now
    return r
  end
  r.ok, r.left, r.reset = true, limit - count - cost, ends
  r.write = function()
    redis.call("SET", key, int(start) .. ":" .. int(count + cost), "PX", ends - now)
  end
  return r
end
