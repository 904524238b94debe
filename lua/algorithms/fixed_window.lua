-- Fixed window: at most `limit` units per window of `window` ms, windows aligned to the epoch.
-- O(1) memory per window, exact for its own definition (up to 2*limit can pass around a window boundary).
--
-- State: the window's count, in a key of its own per window: the Limiter names it, the rule's key,
-- ":", the window's index (now // window), so a count can never be read as another window's. The key
-- lives until its window ends plus a grace of min(window, 1 minute), so that a caller whose clock lags
-- by less than that still finds its window's count; it is counted in the window its clock names.
-- (A lagging caller whose window has expired would start it afresh: callers' clocks must agree within
-- the grace.)
--
-- One rule, cost 1..limit, no reservation (the common call) takes the shortcut in
-- lua/shortcut/fixed_window.lua, the commands of a plain counter:
--   first in a window  INCR (INCRBY for a cost above 1), then PEXPIRE
--   later              INCR
--   denied             INCR. When the window was already full, the overshoot is harmless (full
--                      either way, remaining 0) and stays; only a partial window denied by a large
--                      cost is put back (DECRBY).
-- Several rules (and a peek, a cost above the limit, a reservation) use the check below: GET, then
-- on commit INCRBY (SET PX for a new key). A check reads an overshoot as a full window.
local GRACE = 60000

if several or ARGV[3] == "fixedWindow" then
  local function commit(key, now, units, limit, window, _, start, count)
    local ends = start + window
    if count > 0 then
      redis.call("INCRBY", key, units)
    else
      redis.call("SET", key, units, "PX", ends + math.min(window, GRACE) - now)
    end
    return ends
  end

algorithms.fixedWindow = function(key, now, cost, limit, window)
  local start = now - now % window
  -- A value that is no count (not this version's) reads as a new window, which the commit SETs.
  -- Only what INCRBY takes is a count: tonumber() also reads "1.5", "1e3" or " 3", on which the
  -- commit's INCRBY would fail midway, after other rules have been written.
  local stored = redis.call("GET", key)
  local count = tonumber(stored)
  if not count or string.format("%d", count) ~= stored then count = 0 end
  local ends = start + window
  local room = limit - count
  local reset_at = count > 0 and ends or now
  if cost > limit then return room, reset_at, NEVER end
  if cost > room then return room, reset_at, ends - now end
  return room, reset_at, 0, commit, start, count
end
end
