-- Sliding window (estimate): at most `limit` units in any `window` ms, estimated from two counters,
-- the current aligned window and the previous one. O(1) memory.
--
--   estimate(t) = previous * max(0, spread - elapsed) / spread + current,
--   elapsed = t - current window start, spread = window
--
-- It assumes the previous window's traffic was spread evenly. That is exact for even traffic; in the
-- worst case (the whole previous window's traffic at its very end) a window of `window` ms that
-- straddles the boundary can hold up to 2*limit - 1 units. All comparisons are multiplied through by
-- `spread`, so they are integer arithmetic.
--
-- Clock skew. A caller whose clock lags into the window before the stored one is decided at the stored
-- window's start (the previous window weighed fully) and counted in it: it takes nothing a caller at
-- that start could not, and the stored window never moves back. Once such a caller was admitted, the
-- state knows that clocks disagree: then spread is the ms from the previous window's start to the end
-- of the slot (one of SLOTS equal parts of the window) where its latest unit came, as the state keeps
-- it (below a limit of SMALL). Clocks ahead of the true time move a burst that straddles a boundary to
-- a window's start; spread over the whole window, it would weigh on nearly all of the next one. And so
-- a unit in a later slot than the latest is refused when spreading the window's units up to it would
-- weigh on the next window more than this window's room: counted()'s `late`.
--
-- State, when limit < PACK (the usual case): one integer (below SMALL, with slots: see #state),
-- stamp * STAMP + current * PACK + previous, stamp = (window index mod 4) + 1, so a later unit in the
-- same window is one INCRBY and nothing is formatted or matched. The key lives until its window has
-- faded out, a window after it ends, so a stored stamp is this window's, the previous one's, or (a
-- lagging caller) the next one's; mod 4 keeps the one before the previous apart from the next (clocks
-- must agree within a window). A larger limit keeps the text state
-- "<current start>:<current>:<previous>" (no slots). A state stored without slots reads as clocks
-- that agreed so far.
-- Commands: GET, then INCRBY on commit (SET PX when a window starts; always SET PX for the text state).
--
-- Counting (the rule's third parameter, src/engine/algorithms/shared.ts's CountingOptions): 1
-- (overshoot) counts a denied charge while the window has room left, up to four limits in all (a
-- peek never); 2 (gives back) admits every decision and takes its cost off this window's count, which
-- may go below zero: a credit, weighed like any count, so it fades through the next window. A state
-- with a count below zero is kept as text, "<current start>:<current>:<previous>", whatever the limit
-- (a packed integer holds none); read() tries it only when the stored value is no integer, and the
-- first commit that brings both counts back to zero or more packs it again.
--
-- #state
local PACK = 2 ^ 25
local STAMP = 2 ^ 50
-- one unit in the packed state, as INCRBY takes it (slotted, in the same slot: "262144", 2^18)
local ONE = "33554432"
-- Below a limit of SMALL, the packed state also keeps where in each window its latest unit came: the
-- slot, one of SLOTS equal parts of the window. value = base + (window index mod 4) * 2^48
-- + slots * SLOT + current * SMALL + previous, slots = latest slot of this window * SLOTS + latest
-- slot of the previous one, base = 6 * 2^50 while clocks agreed, 7 * 2^50 once they did not (SKEWED
-- in the slots passed around; SAME: stored in the layout this limit writes, so INCRBY can take units).
-- Values without slots are below 5 * 2^50.
local SMALL = 2 ^ 18
local SLOTS = 64
local SLOT = 2 ^ 36
local WHOLE = 4095
local SAME = 4096
local SKEWED = 8192
-- The functions below write these out (2 ^ 18, 64, 2 ^ 36, 4095, 4096, 8192, 6 * 2 ^ 50): each local
-- a function captures costs an allocation on every run of the script.

-- The stored state as seen from the window starting at `start`: the stored window's start (start,
-- start + window or start - window for the packed state), its count, its previous window's count,
-- its slots (WHOLE where unknown, and at a limit of SMALL or more, which does not use them; plus
-- SKEWED), and whether it keeps slots. Nil when there is none this version wrote. `strict`: only what
-- INCRBY takes is a packed state (the limiter script's commit must not fail midway, after other rules
-- were written; alone, a rule's INCRBY failing fails only its own call).
local function read(key, limit, start, window, strict)
  local stored = redis.call("GET", key)
  if not stored then return nil end
  local value = limit < PACK and tonumber(stored)
  if not value then
    -- the text state (a limit of PACK or more, or a credit: counts below zero), or nothing this
    -- version wrote; no fifth value: a text state is in no packed layout
    local s, c, p = string.match(stored, "^(%-?%d+):(%-?%d+):(%-?%d+)$")
    if s then return tonumber(s), tonumber(c), tonumber(p), 4095 end
    return nil
  end
  if strict and string.format("%d", value) ~= stored then return nil end
  local unit, pack, slots, slotted = STAMP, PACK, 4095, value >= 6 * 2 ^ 50
  -- slotted: its stamp read as 1..4 too, in units of 2^48. (x - x % y) / y is floor(x / y) without a
  -- call: this runs on every decision.
  local skewed = 0
  if slotted then
    if value >= 7 * 2 ^ 50 then value, skewed = value - 2 ^ 50, 8192 end
    value, unit, pack = value - 6 * 2 ^ 50 + 2 ^ 48, 2 ^ 48, 2 ^ 18
  end
  local rest = value % unit
  local stamp = (value - rest) / unit
  if slotted then
    value = rest % 2 ^ 36
    if limit < 2 ^ 18 then slots = (rest - value) / 2 ^ 36 + skewed end
    rest = value
  end
  local previous = rest % pack
  -- the stored window: this one (0), the next (1) or the previous (3); 2 is neither
  local at = (stamp - 1 - start / window) % 4
  if at == 2 then return nil end
  return start + (at == 3 and -1 or at) * window, (rest - previous) / pack, previous, slots, slotted
end

-- The window a caller at `now` is counted in, its two counts, the whole units it could take now, the
-- ms the previous window's units are taken as spread over (from its start), and the slots (plus SAME).
-- The window is now's, or the stored (newer) one when the caller's clock lags behind its start; such a
-- caller is decided as at that window's start: it weighs the previous window fully, never more than
-- its whole count, and can take nothing a caller at the start of that window could not.
local function counted(key, now, limit, window, strict)
  local start, current, previous, slots = now - now % window, 0, 0, 0
  local s, c, p, k, slotted = read(key, limit, start, window, strict)
  if s and s >= start then
    start, current, previous, slots = s, c, p, k
    if slotted == (limit < 2 ^ 18) then slots = slots + 4096 end
  elseif s == start - window then
    -- its latest slot is now the previous window's
    local skewed = k >= 8192 and 8192 or 0
    k = k - skewed
    previous, slots = c, (k - k % 64) / 64 + skewed
  end
  -- late: once clocks disagreed, a unit in a later slot than this window's latest spreads all of its
  -- units up to that slot, so they weigh on the next window that much longer. Refused when that extra
  -- weight, current * (ms the spread grows), is more than the room this window leaves, (limit -
  -- current) * window: a few late units must not cost the next window's start its whole limit.
  local late = false
  if slots >= 8192 and current > 0 and now > start then
    local latest = slots % 4096
    latest = (latest - latest % 64) / 64
    local slot = math.floor((now - start) * 64 / window)
    if slot > latest then
      local from, to = (latest + 1) * window + 63, (slot + 1) * window + 63
      late = current * ((to - to % 64) - (from - from % 64)) / 64 > (limit - current) * window
    end
  end
  if previous == 0 then return start, current, 0, late and math.min(0, limit - current) or limit - current, window,
    slots, late end
  local spread = window
  if slots >= 8192 then
    spread = (slots % 64 + 1) * window + 63
    spread = (spread - spread % 64) / 64
  end
  local weight = now > start and math.max(0, spread - now + start) or spread
  local room = limit * spread - previous * weight - current * spread
  room = (room - room % spread) / spread
  if late and room > 0 then room = 0 end
  return start, current, previous, room, spread, slots, late
end

-- The state as stored for the window starting at `start`.
local function encode(limit, start, window, current, previous, slots)
  if current < 0 or previous < 0 then return string.format("%d:%d:%d", start, current, previous) end
  local stamp = start / window % 4
  if limit < 2 ^ 18 and current < 2 ^ 18 and previous < 2 ^ 18 then
    return string.format("%d", (slots >= 8192 and 7 or 6) * 2 ^ 50 + stamp * 2 ^ 48 + slots % 4096 * 2 ^ 36
      + current * 2 ^ 18 + previous)
  elseif limit < PACK then
    return string.format("%d", (stamp + 1) * STAMP + current * PACK + previous)
  end
  return string.format("%d:%d:%d", start, current, previous)
end

-- Takes `units` more in the window starting at `start`, in now's slot of it (a lagging caller's: the
-- first, and its clock marks the state SKEWED). The key matters until that window has faded out, a
-- window after it ends. Returns that (the reset) and the window counted in.
local function commit(key, now, units, limit, window, _, start, current, previous, slots)
  local fades = start + 2 * window
  -- slots unknown (a caller that has none): the whole window; and INCRBY only while the count fits
  slots = slots or 4095
  local skewed = slots >= 8192 and 8192 or 0
  slots = slots - skewed
  local same = slots >= 4096 and (limit >= 2 ^ 18 or current + units < 2 ^ 18)
  if slots >= 4096 then slots = slots - 4096 end
  local earlier = slots % 64
  local latest = (slots - earlier) / 64
  -- whether now lies past the latest slot (a lagging caller's never does): its slot computed only then
  local slot = latest
  if current == 0 or (now - start) * 64 >= (latest + 1) * window then
    -- (a floor division of whole numbers, no call)
    local at = (now - start) * 64
    slot = now > start and (at - at % window) / window or 0
  end
  local marks = now < start and skewed == 0 and limit < 2 ^ 18
  if marks then skewed = 8192 end
  if current > 0 and same then
    -- (without slots, latest is the last slot: nothing moves)
    redis.call("INCRBY", key, units == 1 and slot == latest and not marks and (limit < 2 ^ 18 and "262144" or ONE)
      or string.format("%d", units * (limit < 2 ^ 18 and 2 ^ 18 or PACK) + (slot - latest) * 64 * 2 ^ 36
        + (marks and 2 ^ 50 or 0)))
  else
    redis.call("SET", key, encode(limit, start, window, current + units, previous, slot * 64 + earlier + skewed),
      -- (an expiry below 10^14 ms as a number: any Redis writes it exactly)
      "PX", fades - now < 1e14 and fades - now or string.format("%d", fades - now))
  end
  return fades, start
end

-- #check
-- A rule that gives back: `units` off this window's count, below zero if need be (a credit).
local function give_back(key, now, units, limit, window, _, start, current, previous, slots)
  redis.call("SET", key, encode(limit, start, window, current - units, previous, slots),
    "PX", string.format("%d", start + 2 * window - now))
  return start + 2 * window, start
end

algorithms.slidingWindow = function(key, now, cost, limit, window, counting)
  local start, current, previous, room, spread, slots, late = counted(key, now, limit, window, true)
  -- back to the full limit once every counted unit has faded out
  local reset_at = current > 0 and start + 2 * window or previous > 0 and start + window or now
  if counting == 2 then
    -- admitted whatever the counts; the dispatcher answers room - cost: what is left after the refund
    return math.max(room + 2 * cost, cost), reset_at, 0, give_back, start, current, previous, slots
  end
  -- overshoot: a denied charge counted while the window has room, up to 4 limits in all (a settle's
  -- debt cap: the wait and the state stay bounded, below PACK); A[2] is "0" for a peek, never counted
  if counting == 1 and cost > room and room > 0 and A[2] ~= "0" then
    local units = math.min(cost, math.min(4 * limit, PACK - 1) - current)
    if units > 0 then commit(key, now, units, limit, window, 0, start, current, previous, slots) end
  end
  if cost > room then
    -- (a credit may leave room for more than the limit: only then a cost above it is admitted)
    if cost > limit then return room, reset_at, NEVER end
    if current + cost <= limit and not late then
      -- the previous window's weight has to fade: smallest e with previous*(spread-e) <= room left,
      -- reached at start + e (counted from now, not from the clamped elapsed: a lagging caller waits
      -- for its lag as well)
      local fade = spread - math.floor((limit - current - cost) * spread / previous)
      return room, reset_at, math.max(1, start + fade - now)
    end
    -- only the next window can admit it (a late unit too), once this window's count has faded enough
    -- over its spread
    local own = window
    if slots >= 8192 then own = math.floor(((math.floor(slots % 4096 / 64) + 1) * window + 63) / 64) end
    local fade = math.max(0, own - math.floor((limit - cost) * own / current))
    return room, reset_at, (start + window - now) + fade
  end
  return room, reset_at, 0, commit, start, current, previous, slots
end

-- #one-rule
-- One rule, cost 1..limit, limit below PACK, no reservation, not a rule that gives back. ARGV: now
-- (hexadecimal), cost, limit, window, and the rule's counting: "1" with overshoot (a denied charge is
-- counted as the check counts it; with overrides on, ARGV[5] is the applied rule's third parameter or
-- the plan table). A credit (counts below zero, which a rule that gives back leaves) is decided on
-- exactly, and answered as counts of zero: `remaining` says at most the limit then, the limiter script
-- (a peek) says it exactly. Answers one integer, n when admitted and -n - 1 when denied:
-- n = counts * 4 + newer * 2 + slotted, with current after the cost when admitted and as it stands
-- when denied (before an overshoot is counted); newer is 1 when a
-- lagging caller was counted in the next window. Slotted 1 (limit and counts below SMALL):
-- counts = (slots * SLOT + current * SMALL + previous) * 2 + skewed, skewed (1 or 0) as read, and the
-- slots as read once skewed, else 0 (only a skewed state spreads by them): so n stays below 2^39
-- while clocks agree, and the overrides' variant can still tag it as an integer; else
-- counts = current * PACK + previous, and not skewed.
-- (cost, limit and window are digits, or a number a stored override's reader read: arithmetic makes
-- them numbers without a call of tonumber(), which also reads the digits twice)
local now, cost = tonumber(ARGV[1], 16), ARGV[2]
cost = cost == "1" and 1 or cost + 0
local limit, window = ARGV[3] + 0, ARGV[4] + 0
local key = KEYS[1]
local start, current, previous, room, _, slots = counted(key, now, limit, window, false)
local newer = start > now and 2 or 0
local admitted = cost <= room
if admitted then
  commit(key, now, cost, limit, window, 0, start, current, previous, slots)
  current = current + cost
elseif ARGV[5] == "1" and room > 0 then
  local units = math.min(cost, math.min(4 * limit, PACK - 1) - current)
  if units > 0 then commit(key, now, units, limit, window, 0, start, current, previous, slots) end
end
if current < 0 or previous < 0 then current, previous = math.max(current, 0), math.max(previous, 0) end
local n
if limit < SMALL and current < SMALL and previous < SMALL then
  if slots >= SKEWED then
    n = (((slots % SAME) * SLOT + current * SMALL + previous) * 2 + 1) * 4 + newer + 1
  else
    n = (current * SMALL + previous) * 8 + newer + 1
  end
else
  n = (current * PACK + previous) * 4 + newer
end
if admitted then return n end
return -n - 1

-- #refund
-- Back to the window the units were counted in (starting at `start`), or to the previous count once
-- that window has become the previous one; nothing once it has faded out at `now` (the state keeps
-- its window's index mod 4 only: a window four later would read as this one). The key keeps its expiry.
refund.slidingWindow = function(key, now, units, limit, window, _, start)
  if now >= start + 2 * window then return false end
  local s, current, previous, slots = read(key, limit, start, window, true)
  -- (a count below zero, a credit, stays as it is)
  if s == start then
    current = math.max(math.min(current, 0), current - units)
  elseif s == start + window then
    previous = math.max(math.min(previous, 0), previous - units)
  else
    return false
  end
  redis.call("SET", key, encode(limit, s, window, current, previous, slots), "KEEPTTL")
  return true
end

-- #settle
-- Below the reservation: the refund above, to the counter the units were counted in (the window
-- starting at `start`, current or by now previous); nothing once that window has faded out. Above: the
-- extra is counted in the window of the settle's own clock, past the limit if need be (a debt: it
-- weighs on this window and fades through the next), up to DEBT_CAP times the limit (lua/settle.lua; and below PACK).
settle.slidingWindow = function(key, now, cost, actual, limit, window, _, start)
  if actual < cost then return refund.slidingWindow(key, now, cost - actual, limit, window, 0, start) end
  local s, current, previous, _, _, slots = counted(key, now, limit, window, true)
  local cap = DEBT_CAP * limit
  if limit < PACK then cap = math.min(cap, PACK - 1) end
  local units = math.min(actual - cost, cap - current)
  if units <= 0 then return false end
  commit(key, now, units, limit, window, 0, s, current, previous, slots)
  return true
end
