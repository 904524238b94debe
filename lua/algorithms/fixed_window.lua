-- Fixed window: at most `limit` units per window of `window` ms, windows aligned to the epoch.
-- O(1) memory, exact for its own definition (up to 2*limit can pass around a window boundary).
--
-- State: one integer, stamp * SPAN + count, so that a single INCRBY both counts and reads it. The
-- stamp (1, 2 or 3: the window's index mod 3, plus 1) says which window the count belongs to:
--   - this window's stamp: the count is this window's;
--   - the next window's stamp: this caller's clock lags into the previous window; it is counted in
--     the newer stored window, so it can never reopen an old one (stored time never moves back);
--   - any other value, or no key: a new window starts.
-- The key lives until its window ends. A clock that lags by more than a whole window cannot be told
-- from an older window (mod 3) and restarts the count: callers' clocks must agree within a window.
--
-- One rule, cost 1..limit, no reservation (the common call) takes the shortcut in
-- lua/shortcut/fixed_window.lua (the first lines of the limiter script), one command like a plain counter:
--   first in a window  INCRBY, then SET stamp*SPAN + cost PX <until the window ends>
--   later              INCRBY
--   denied             INCRBY. When the window was already full, the overshoot is harmless (full
--                      either way, remaining 0) and stays; only a partial window denied by a large
--                      cost is put back (DECRBY), as is an overshoot grown to half of SPAN.
-- Several rules (and a peek, and a cost above the limit) use the check below: GET, then on commit
-- INCRBY (or SET, in a new window). A check reads an overshoot as a full window.
--
-- A stored count stays at most SPAN/2 (limit <= 2^50 = SPAN/2), so an INCRBY reads at most SPAN/2 +
-- limit <= SPAN: a count of exactly SPAN still belongs to its stamp, and 3 * SPAN + SPAN = 2^53 is exact.
local SPAN = 2 ^ 51

if several or ARGV[3] == "fixedWindow" then
  -- count > 0: the stored window is the one counted in, so add to it; else start the window.
  local function commit(key, now, units, limit, window, _, start, count, stamp)
    local ends = start + window
    if count > 0 then
      redis.call("INCRBY", key, units)
    else
      redis.call("SET", key, stamp + units, "PX", ends - now)
    end
    return ends
  end

algorithms.fixedWindow = function(key, now, cost, limit, window)
  local start = now - now % window
  local index = start / window
  local stamp = (index % 3 + 1) * SPAN
  local count = 0
  local value = tonumber(redis.call("GET", key))
  if value then
    local newer = ((index + 1) % 3 + 1) * SPAN
    if value >= stamp and value <= stamp + SPAN then
      count = value - stamp
    elseif value >= newer and value <= newer + SPAN then
      start, stamp, count = start + window, newer, value - newer
    end
  end
  local ends = start + window
  local room = limit - count
  local reset_at = count > 0 and ends or now
  if cost > limit then return room, reset_at, NEVER end
  if cost > room then return room, reset_at, ends - now end
  return room, reset_at, 0, commit, start, count, stamp
end
end
