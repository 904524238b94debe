-- GCRA (generic cell rate algorithm): `limit` per `period` ms, up to `burst` at once. O(1) memory, exact.
--
-- The math, with time in ms:
--   emission interval   T   = period / limit        (one unit earns back after T)
--   tolerance           tau = T * (burst - 1)        (how far ahead of schedule a caller may run)
--   theoretical arrival TAT = when the stream would be back to empty if it sent at exactly one unit per T
-- A request of n units at time t is admitted iff  max(TAT, t) + n*T - t <= tau + T = burst*T,
-- and then TAT becomes max(TAT, t) + n*T. Nothing else is stored.
--
-- T is a fraction (1000/3 ms, ...), so TAT is kept exactly as two integers: TAT = A + B/limit ms,
-- with 0 <= B < limit. In units of 1/limit ms, T is `period` and burst*T is `burst*period`, so every
-- comparison below is integer arithmetic, exact for any realistic limit.
-- State: "<A>:<B>:<L>:<P>", kept until TAT (when it equals "no key"; a refund back to idle leaves a TAT
-- at or before now, read as no key by every caller but a lagging one), with L and P the limit and period
-- it was written under (the decimal strings the caller sends). Commands: GET, then SET PX on commit
-- (and once, on the first read under a new rate, a SET of the converted state).
--
-- A change of rate (a plan, an override) carries the UNITS used, not the time owed: read under another
-- (limit, period), d = min(ceil(d_old / P), burst) * period, where d_old = max(0, (A - now)*L + B) is the
-- old state's d, in 1/L ms, and a unit partly earned back counts as used. So an upgrade from 100/min
-- with 100 used to 1000/min leaves 900 at once; a downgrade below the units used reads as full and
-- refills at the new rate (the excess is forgiven). A change of burst alone needs nothing: d means the
-- same. A state of two fields (written before the rate was stored) reads as written under the current
-- rate.
--
-- A token bucket runs as GCRA: `capacity` tokens refilled continuously at `refillRate` per `interval`
-- is GCRA with limit = refillRate, period = interval, burst = capacity (tokens left = burst - d/period).
-- A caller whose clock lags sees the bucket as it was at its own time (fewer tokens), so it is only
-- held back more, and the state never moves back.
--
-- This file is the algorithm's one source; scripts/build-lua.mjs cuts it at its `-- #` lines:
-- state (shared by every path), check (the limiter script), one-rule (a script of its own), refund.

-- #state
-- Stores TAT = now + d under `rate`; returns when the stream is back to idle (the reset).
local function write(key, now, limit, d, rate)
  -- (whole numbers: a floor division is (x - x % y) / y, no call; an expiry below 10^14 ms is given
  -- as a number, which any Redis writes exactly, with at least 14 digits)
  local whole = (d - d % limit) / limit
  local ttl = d + limit - 1
  ttl = (ttl - ttl % limit) / limit
  redis.call("SET", key, string.format("%d:%d%s", now + whole, d - whole * limit, rate), "PX",
    ttl < 1e14 and ttl or string.format("%d", ttl))
  return now + ttl
end

-- The state at `now`: d, how far TAT lies ahead of now, in 1/limit ms (0 when the stream is idle; false
-- when there is no state), the whole units the rule could take, the room left under burst*T, and
-- (a state written under this rate) d as stored, below 0 when TAT lies before now. A
-- caller whose clock lags sees a larger d and is only held back more. `rate` is ":<limit>:<period>" as
-- the caller sent them: the common case (the same rate) is one string comparison, no parsing. A state
-- written under another rate is converted (see the header) and stored so, once.
-- Bounds (every rule keeps burst*period <= 2^50, src/engine/algorithms/shared.ts): a commit writes
-- d <= burst*period under the rate it ran with, so d_old is at most the old burst*P plus L times a
-- lagging clock's lag, and the new d is at most burst*period: all exact in a Lua double (< 2^53).
local function read(key, now, limit, period, burst, rate)
  local stored = redis.call("GET", key)
  local d, raw = 0, nil
  if stored then
    local a, b, written = string.match(stored, "^(%-?%d+):(%d+)(.*)$")
    -- (digits: arithmetic reads them, no call)
    a = a + 0
    if written == rate or written == "" then
      d = (a - now) * limit + b
      raw = d
      if d < 0 then d = 0 end
    else
      local l, p = string.match(written, "^:(%d+):(%d+)$")
      l, p = l + 0, p + 0
      local old = (a - now) * l + b
      if old > 0 then
        -- stored at once under the rate applied (the same usage, now earned back at that rate), also
        -- by a denial or a peek: else the old TAT would keep earning back at the old rate
        d = math.min(math.floor((old + p - 1) / p), burst) * period
        write(key, now, limit, d, rate)
      end
    end
  end
  local room = burst * period - d
  return stored and d, (room - room % period) / period, raw
end

-- #check
local function ceil_div(a, b)
  return math.floor((a + b - 1) / b)
end

-- Takes `units` more: TAT moves on by units*T. Returns the reset and, as where the units were counted,
-- the same reset: the TAT they hold, rounded up to a ms, which caps what a refund gives back (#refund).
local function commit(key, now, units, limit, period, _, d, rate)
  local reset = write(key, now, limit, d + units * period, rate)
  return reset, reset
end

algorithms.gcra = function(key, now, cost, limit, period, burst)
  -- the rate as the caller writes it: the first rule's strings as sent when they are this rule's (one
  -- rule, the common case), else formatted (several rules, or parameters not taken from ARGV as sent)
  local rate
  if tonumber(ARGV[4]) == limit and tonumber(ARGV[5]) == period then
    rate = ":" .. ARGV[4] .. ":" .. ARGV[5]
  else
    rate = string.format(":%d:%d", limit, period)
  end
  local d, room = read(key, now, limit, period, burst, rate)
  d = d or 0
  local reset_at = now + ceil_div(d, limit)
  if cost > burst then return room, reset_at, NEVER end
  if cost > room then return room, reset_at, ceil_div(d + cost * period - burst * period, limit) end
  return room, reset_at, 0, commit, d, rate
end

-- #one-rule
-- One rule, cost 1..burst, no reservation. ARGV: now (hexadecimal), cost, limit, period, burst.
-- Answers one integer: d after the cost when admitted (d >= 1), or -(d before) - 1 when denied.
local now = tonumber(ARGV[1], 16)
local cost = ARGV[2] == "1" and 1 or tonumber(ARGV[2])
local limit, period, burst = ARGV[3] + 0, ARGV[4] + 0, ARGV[5] + 0
local rate = ":" .. ARGV[3] .. ":" .. ARGV[4]
local key = KEYS[1]
local d, room = read(key, now, limit, period, burst, rate)
d = d or 0
if cost > room then return -d - 1 end
d = d + cost * period
write(key, now, limit, d, rate)
return d

-- #refund
-- TAT moves back by units*T, but never by more than the units still hold: units a decision took are
-- earned back as time passes, and giving back ones already earned back would mint them. Two bounds,
-- the larger applies (each never more than "as if those units had never been taken"):
--   held   H, the TAT right after the units were taken, rounded up to a ms (the decision's resetAt,
--          or a reservation's window). Every later admission saw a TAT at or after H less what
--          refunds gave back since (a refund moves every later decision's units earlier), so the
--          units hold at least H - given - now. For a settle, `given` is read from the key's
--          ledger (below): the ms given back at or after the decision's time (`since`), of units
--          counted at or before it (giving back units counted after it moves none of its own). A
--          lease's refund, or a rollback's, sends its reservation's time and units (lua/refund.lua)
--          and is bounded so: refunds before the reservation never count against it (a rollback
--          gives back all it took). A regional pool's (no `since`, no `taken`: not known) takes
--          given = 0: the refunds just before its reservation cannot be told from those after.
--          H*limit is a whole multiple of g = gcd(limit, period) (every write moves it by whole ms or
--          whole periods), so H*limit >= (held - 1)*limit + g.
--   since  when a settle's decision counted, and `taken`, its cost: its units hold at least
--          since + taken*T, whatever refunds did (none can move a decision's own units before it).
-- A settle before the decision's own time counts from that time. So a prompt settle gives back the
-- difference; later, less, never more; nothing once both bounds have passed.
-- The ledger, "<key>:given", is a sorted set of "<time>:<counted>:<ms>" by time: the ms refunds gave
-- back at `time`, of units counted at `counted` (every refund writes it), kept GIVEN_SPANS bursts
-- (burst*T) long: a decision whose units still hold anything was counted less than one burst (of its
-- own rule) before.
-- Back at idle (TAT at or before now) the state stays, with its expiry: a lagging caller still reads
-- the units taken before its own clock (deleting it would let that caller in as if none were), and
-- every caller at now or later reads it as no state. A state written under another rate is first read
-- as the units it counted (#state), so units go back as units, to idle at now at most.
local GIVEN_SPANS = 4

-- The ms refunds gave back from `from` on, of decisions counted at or before `upto`: one counted
-- later comes after the decision in the stream, so giving back its units moved none of the decision's.
local function given_since(ledger, from, upto)
  local total = 0
  for _, entry in ipairs(redis.call("ZRANGEBYSCORE", ledger, string.format("%d", from), "+inf")) do
    local counted, ms = string.match(entry, "^%-?%d+:(%-?%d+):(%d+)$")
    if tonumber(counted) <= upto then total = total + tonumber(ms) end
  end
  return total
end

refund.gcra = function(key, now, units, limit, period, burst, held, limit_sent, period_sent, since, taken)
  since = since or 0
  local at = math.max(now, since)
  local span = math.floor((burst * period + limit - 1) / limit)
  local g, r = limit, period
  while r > 0 do g, r = r, g % r end
  local give = taken and (since - at) * limit + taken * period or 0
  local ledger = key .. ":given"
  local held_give = (held - at) * limit - limit + g
  if taken and held_give > give then
    local upto = since > 0 and since or held
    held_give = held_give - given_since(ledger, math.max(held - span, since), upto) * limit
  end
  give = math.max(give, held_give)
  give = math.min(units * period, give)
  if give <= 0 then return false end
  local rate = ":" .. limit_sent .. ":" .. period_sent
  local d, _, raw = read(key, now, limit, period, burst, rate)
  if not d then return false end
  d = (raw or d) - give
  if d > 0 then
    write(key, now, limit, d, rate)
  else
    if not raw then d = 0 end
    local whole = math.floor(d / limit)
    redis.call("SET", key, string.format("%d:%d%s", now + whole, d - whole * limit, rate), "KEEPTTL")
  end
  -- what went back, in whole ms rounded up (counted more, never less), with when its units were
  -- counted (a pool's, not known: at the earliest one burst before their TAT), added to the entry of
  -- this instant and that time
  local ms = math.floor((give + limit - 1) / limit)
  local member = string.format("%d:%d:", now, since > 0 and since or held - span)
  local stamp = string.format("%d", now)
  for _, entry in ipairs(redis.call("ZRANGEBYSCORE", ledger, stamp, stamp)) do
    if string.sub(entry, 1, #member) == member then
      redis.call("ZREM", ledger, entry)
      ms = ms + tonumber(string.sub(entry, #member + 1))
    end
  end
  redis.call("ZADD", ledger, stamp, member .. ms)
  redis.call("ZREMRANGEBYSCORE", ledger, "-inf", string.format("(%d", now - GIVEN_SPANS * span))
  redis.call("PEXPIRE", ledger, string.format("%d", GIVEN_SPANS * span))
  return true
end

-- #settle
-- Below the reservation: the refund above (TAT back by the difference, at most what the decision still
-- holds; `since` is when it counted, its decidedAt, or 0, and `cost` what it took). Above: TAT on by the
-- extra, past the burst if need be (a debt: later decisions wait until it is earned back), with d at
-- most DEBT_CAP times burst*T (lua/settle.lua), which bounds the wait and the key's expiry; a stored TAT never moves back.
settle.gcra = function(key, now, cost, actual, limit, period, burst, held, since, limit_sent, period_sent)
  if actual < cost then
    return refund.gcra(key, now, cost - actual, limit, period, burst, held, limit_sent, period_sent, since,
      cost)
  end
  local rate = ":" .. limit_sent .. ":" .. period_sent
  local d = read(key, now, limit, period, burst, rate) or 0
  write(key, now, limit, math.max(d, math.min(d + (actual - cost) * period, DEBT_CAP * burst * period)), rate)
  return true
end
