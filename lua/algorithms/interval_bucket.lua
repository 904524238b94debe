-- Interval bucket: a token bucket of `capacity` tokens that gains `refill` tokens at the end of each
-- `interval` ms (not continuously), counted from its first decision: @upstash/ratelimit's token bucket,
-- which edgelimit/upstash keeps (a test window that ends mid-interval sees no part of its refill).
--
-- State: "<tokens>:<refilled at>" in a key of its own (its suffix says this format: never a gcra TAT).
-- A new bucket (or a value of another format) is full, refilled at `now`. Reading at `now` adds
-- n = (now - at) // interval refills, at most up to capacity (a credit above it is cut to capacity by
-- the first refill, as the peer's is), and moves `at` on by n intervals; a lagging clock adds none and
-- never moves `at` back.
--
-- Parameters: capacity, interval, and refill * 2 + 1 when the rule gives back (CountingOptions'
-- givesBack: every decision adds its cost instead of taking it, past capacity if need be: a credit,
-- capped at MAX_TOKENS so every sum stays exact). A charge is admitted iff cost <= tokens; a denied
-- one takes nothing. The key expires once it would read full: at + ceil((capacity - tokens) / refill)
-- intervals, or, holding capacity or a credit, at the next refill (which makes it full).
--
-- This file is the algorithm's one source; scripts/build-lua.mjs cuts it at its `-- #` lines.

-- #state
-- The largest count of tokens a credit may reach (2^50, the rules' MAX_EXACT).
local MAX_TOKENS = 1125899906842624
-- The one-rule reply's range of debt, in capacities: lua/settle.lua's DEBT_CAP, one more than a settle
-- leaves (room for a debt left under a plan's or override's larger capacity).
local DEBTS = 4

-- Tokens and the last refill's time at `now`, refills added; then the last refill's time as stored
-- (nil for a new bucket).
local function read(key, now, capacity, interval, refill)
  local stored = redis.call("GET", key)
  local tokens, at
  if stored then
    local t, a = string.match(stored, "^(%-?%d+):(%d+)$")
    tokens, at = tonumber(t), tonumber(a)
  end
  if not tokens or not at then return capacity, now end
  local was = at
  if now >= at + interval then
    local n = math.floor((now - at) / interval)
    -- n * refill may be past 2^53 after a long idle time: min() reads it as more than capacity anyway
    tokens = math.min(capacity, tokens + n * refill)
    at = at + n * interval
  end
  return tokens, at, was
end

-- When a bucket holding `tokens`, last refilled at `at`, is full again.
local function full_at(tokens, at, capacity, interval, refill)
  if tokens >= capacity then return at + interval end
  return at + math.floor((capacity - tokens + refill - 1) / refill) * interval
end

-- Writes `tokens` refilled at `at`; returns when it is full (the reset) and where the units were
-- counted: `at`, or `now` for a lagging caller (before `at`), whose settle gives nothing back (#settle).
local function store(key, now, tokens, at, capacity, interval, refill)
  local ends = full_at(tokens, at, capacity, interval, refill)
  redis.call("SET", key, string.format("%d:%d", tokens, at), "PX", string.format("%d", ends - now))
  return tokens >= capacity and now or ends, math.min(at, now)
end

-- #check
-- Takes `units` (the check's commit). (Here, not in #state: the one-rule script makes no closure of it.)
local function commit(key, now, units, capacity, interval, p3, tokens, at)
  return store(key, now, tokens - units, at, capacity, interval, math.floor(p3 / 2))
end

-- A rule that gives back: the cost is added, past capacity if need be.
local function give_back(key, now, units, capacity, interval, p3, tokens, at)
  local after = math.min(tokens + math.min(units, MAX_TOKENS), MAX_TOKENS)
  return store(key, now, after, at, capacity, interval, math.floor(p3 / 2))
end

algorithms.intervalBucket = function(key, now, cost, capacity, interval, p3)
  local refill = math.floor(p3 / 2)
  local tokens, at = read(key, now, capacity, interval, refill)
  local reset_at = tokens >= capacity and now or full_at(tokens, at, capacity, interval, refill)
  if p3 % 2 == 1 then
    -- admitted whatever it holds; the dispatcher answers room - cost: what is left after the refund
    -- (exact for a cost up to 2^52; edgelimit/upstash gives back at most MAX_TOKENS)
    local after = math.min(tokens + math.min(cost, MAX_TOKENS), MAX_TOKENS)
    return math.max(after, 0) + cost, reset_at, 0, give_back, tokens, at
  end
  if cost > tokens then
    -- (a credit may hold more than capacity; refills never do)
    if cost > capacity then return tokens, reset_at, NEVER end
    -- the first refill after which the bucket holds the cost
    return tokens, reset_at, at + math.floor((cost - tokens + refill - 1) / refill) * interval - now
  end
  return tokens, reset_at, 0, commit, tokens, at
end

-- #one-rule
-- One rule, cost >= 1, no reservation. ARGV: now (hexadecimal), cost, capacity, interval, and refill * 2
-- + 1 when the rule gives back (only a plan or a stored override applied by the variant that reads
-- it gives that: a rule that gives back is otherwise the limiter script's). A charge is admitted iff
-- cost <= t, the tokens read; a give-back adds the cost (as #check both).
-- Answers one integer r (src/engine/algorithms/interval-bucket.ts decodes it), with
-- a = at + interval - 1 - now >= 0 (at, the last refill; a >= interval for a lagging caller) and
-- D = DEBTS * capacity, more than a settle leaves in debt:
--   admitted, 0 <= left < capacity         r = 2 * (a * capacity + left)
--   admitted, left >= capacity (a credit)  r = 2 * (left - capacity) + 1   (the reset is now)
--   given back, left < 0 (still a debt)    as 0 left, with a m intervals more, m such that the bucket
--                                          is full as many intervals on as from `left` (the reset)
--   denied, t <= capacity                  r = -2 * (a * (capacity + D + 1) + t + D) - 1
--   denied, t > capacity (cost > t)        r = -2 * (t - capacity) - 2     (the reset is now)
-- Every count is exact (t <= MAX_TOKENS, t >= -D: a debt a settle left under a plan of a larger
-- capacity reads as -D here); a is read as at most 2^52 / capacity - 1 (admitted) or
-- 2^52 / (capacity + D + 1) - 1 (denied): at least an interval for an admission, and for a denial
-- under a rule whose capacity * interval is at most 2^52 / (DEBTS + 2) (the bound is 2^50); beyond
-- that (a lagging caller, a debt's far reset) the reset and retry are told that much earlier.
local now = tonumber(ARGV[1], 16)
local cost = ARGV[2] == "1" and 1 or tonumber(ARGV[2])
local capacity, interval = tonumber(ARGV[3]), tonumber(ARGV[4])
local p3 = tonumber(ARGV[5])
local refill = math.floor(p3 / 2)
local key = KEYS[1]
local tokens, at = read(key, now, capacity, interval, refill)
local a = at + interval - 1 - now
local left
if p3 % 2 == 1 then
  left = math.min(tokens + math.min(cost, MAX_TOKENS), MAX_TOKENS)
elseif cost <= tokens then
  left = tokens - cost
end
if left then
  store(key, now, left, at, capacity, interval, refill)
  if left >= capacity then return 2 * (left - capacity) + 1 end
  if left < 0 then
    local whole = math.floor((capacity + refill - 1) / refill)
    a, left = a + (math.floor((capacity - left + refill - 1) / refill) - whole) * interval, 0
  end
  return 2 * (math.min(a, math.floor(4503599627370496 / capacity) - 1) * capacity + left)
end
if tokens > capacity then return -2 * (tokens - capacity) - 2 end
local debt = DEBTS * capacity
local span = capacity + debt + 1
return -2 * (math.min(a, math.floor(4503599627370496 / span) - 1) * span + math.max(tokens, -debt) + debt) - 1

-- #settle
-- Below the reservation: the difference back, up to capacity (a credit stays as it is), to a bucket
-- that exists and has stored no refill since the decision (`counted`, its last refill's time: a
-- stored one after it is a later refill). Until then every change to the bucket adds or takes tokens,
-- so the difference back (its own refill at `now` included) leaves it as if only `actual` had been
-- taken. After a refill, nothing: a refill may have been cut to capacity while the units were out,
-- and giving them back then would hand out tokens a full bucket had already forgone. Above: the extra
-- taken, below zero if need be (a debt), to at most DEBT_CAP * capacity taken in all (lua/settle.lua, as
-- the other algorithms count theirs): (DEBT_CAP - 1) * capacity below zero.
-- Both at the settle's own clock.
settle.intervalBucket = function(key, now, cost, actual, capacity, interval, p3, counted)
  local refill = math.floor(p3 / 2)
  if actual < cost then
    local tokens, at, was = read(key, now, capacity, interval, refill)
    if not was or was > counted then return false end
    local given = math.max(tokens, math.min(capacity, tokens + cost - actual))
    if given == tokens then return false end
    store(key, now, given, at, capacity, interval, refill)
    return true
  end
  local tokens, at = read(key, now, capacity, interval, refill)
  local left = math.min(tokens, math.max(tokens - (actual - cost), (1 - DEBT_CAP) * capacity))
  if left == tokens then return false end
  store(key, now, left, at, capacity, interval, refill)
  return true
end
