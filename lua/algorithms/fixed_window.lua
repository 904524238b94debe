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
    s = tonumber(s)
    if s >= start then start, count = s, tonumber(c) end
  end
  local ends = start + window
  local reset_now = count > 0 and ends or now
  if cost > limit then return false, NEVER, limit - count, reset_now end
  if count + cost > limit then return false, ends - now, limit - count, reset_now end
  return true, 0, limit - count, reset_now, limit - count - cost, ends,
    set_px, int(start) .. ":" .. int(count + cost), ends - now
end
