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
-- State, when limit < PACK (the usual case): one integer, stamp * STAMP + current * PACK + previous,
-- stamp = (window index mod 4) + 1, so a later unit in the same window is one INCRBY and nothing is
-- formatted or matched. The key lives until its window has faded out, a window after it ends, so a
-- stored stamp is this window's, the previous one's, or (a lagging caller) the next one's; mod 4 keeps
-- the one before the previous apart from the next (clocks must agree within a window). A larger limit
-- keeps the text state "<current start>:<current>:<previous>".
-- Commands: GET, then INCRBY on commit (SET PX when a window starts; always SET PX for the text state).
--
-- This file is the algorithm's one source; scripts/build-lua.mjs cuts it at its `-- #` lines:
-- state (shared by every path), check (the limiter script), one-rule (a script of its own), refund.

-- #state
local PACK = 2 ^ 25
local STAMP = 2 ^ 50
-- one unit in the packed state, as INCRBY takes it
local ONE = "33554432"

-- The stored state as seen from the window starting at `start`: the stored window's start (start,
-- start + window or start - window for the packed state), its count and its previous window's
-- count; nil when there is none this version wrote. `strict`: only what INCRBY takes is a packed state
-- (the limiter script's commit must not fail midway, after other rules were written; alone, a rule's
-- INCRBY failing fails only its own call).
local function read(key, limit, start, window, strict)
  local stored = redis.call("GET", key)
  if not stored then return nil end
  if limit < PACK then
    local value = tonumber(stored)
    if not value or (strict and string.format("%d", value) ~= stored) then return nil end
    local stamp = math.floor(value / STAMP)
    local counts = value - stamp * STAMP
    local current = math.floor(counts / PACK)
    local previous = counts - current * PACK
    local index = start / window
    if stamp == index % 4 + 1 then return start, current, previous end
    if stamp == (index + 1) % 4 + 1 then return start + window, current, previous end
    if stamp == (index + 3) % 4 + 1 then return start - window, current, previous end
    return nil
  end
  local s, c, p = string.match(stored, "^(%-?%d+):(%d+):(%d+)$")
  if s then return tonumber(s), tonumber(c), tonumber(p) end
end

-- The window a caller at `now` is counted in, its two counts, and the whole units it could take now.
-- The window is now's, or the stored (newer) one when the caller's clock lags behind its start; such a
-- caller weighs the previous window fully, as at the start: never more than its whole count.
local function counted(key, now, limit, window, strict)
  local start, current, previous = now - now % window, 0, 0
  local s, c, p = read(key, limit, start, window, strict)
  if s then
    if s >= start then
      start, current, previous = s, c, p
    elseif s == start - window then
      previous = c
    end
  end
  local elapsed = now > start and now - start or 0
  local room = math.floor((limit * window - previous * (window - elapsed) - current * window) / window)
  return start, current, previous, room
end

-- The state as stored for the window starting at `start`.
local function encode(limit, start, window, current, previous)
  if limit < PACK then
    return string.format("%d", (start / window % 4 + 1) * STAMP + current * PACK + previous)
  end
  return string.format("%d:%d:%d", start, current, previous)
end

-- Takes `units` more in the window starting at `start`. The key matters until that window has faded
-- out, a window after it ends. Returns that (the reset) and the window counted in.
local function commit(key, now, units, limit, window, _, start, current, previous)
  local fades = start + 2 * window
  if limit < PACK and current > 0 then
    redis.call("INCRBY", key, units == 1 and ONE or string.format("%d", units * PACK))
  else
    redis.call("SET", key, encode(limit, start, window, current + units, previous),
      "PX", string.format("%d", fades - now))
  end
  return fades, start
end

-- #check
algorithms.slidingWindow = function(key, now, cost, limit, window)
  local start, current, previous, room = counted(key, now, limit, window, true)
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

-- #one-rule
-- One rule, cost 1..limit, limit below PACK, no reservation. ARGV: now (hexadecimal), cost, limit,
-- window. Answers one integer: ((current * PACK + previous) * 2 + newer), current after the cost, when
-- admitted; -((current * PACK + previous) * 2 + newer) - 1, the counts as they stand, when denied;
-- newer is 1 when a lagging caller was counted in the next window.
local now = tonumber(ARGV[1], 16)
local cost = ARGV[2] == "1" and 1 or tonumber(ARGV[2])
local limit, window = tonumber(ARGV[3]), tonumber(ARGV[4])
local key = KEYS[1]
local start, current, previous, room = counted(key, now, limit, window, false)
local newer = start > now and 1 or 0
if cost > room then
  return -((current * PACK + previous) * 2 + newer) - 1
end
commit(key, now, cost, limit, window, 0, start, current, previous)
return ((current + cost) * PACK + previous) * 2 + newer

-- #refund
-- Back to the window the units were counted in (starting at `start`), or to the previous count once
-- that window has become the previous one. The key keeps its expiry.
refund.slidingWindow = function(key, _, units, limit, window, _, start)
  local s, current, previous = read(key, limit, start, window, true)
  if s == start then
    current = math.max(0, current - units)
  elseif s == start + window then
    previous = math.max(0, previous - units)
  else
    return false
  end
  redis.call("SET", key, encode(limit, s, window, current, previous), "KEEPTTL")
  return true
end

-- #settle
-- Below the reservation: the refund above, to the counter the units were counted in (the window
-- starting at `start`, current or by now previous); nothing once that window has faded out. Above: the
-- extra is counted in the window of the settle's own clock, past the limit if need be (a debt: it
-- weighs on this window and fades through the next), up to twice the limit (and below PACK).
settle.slidingWindow = function(key, now, cost, actual, limit, window, _, start)
  if actual < cost then return refund.slidingWindow(key, now, cost - actual, limit, window, 0, start) end
  local s, current, previous = counted(key, now, limit, window, true)
  local cap = 2 * limit
  if limit < PACK then cap = math.min(cap, PACK - 1) end
  local units = math.min(actual - cost, cap - current)
  if units <= 0 then return false end
  commit(key, now, units, limit, window, 0, s, current, previous)
  return true
end
