-- Fixed window: at most `limit` units per window of `window` ms, windows aligned to the epoch.
-- O(1) memory, exact for its own definition (up to 2*limit can pass around a window boundary).
--
-- State: the window's count, in a key of its own per window: the Limiter names it, the rule's key,
-- ":", the window's index (now // window), so a count can never be read as another window's. The key
-- lives until its window ends plus a grace of min(window, GRACE), so that a caller whose clock lags
-- by less than that still finds its window's count; it is counted in the window its clock names.
-- (A lagging caller whose window has expired would start it afresh: callers' clocks must agree within
-- the grace.)
--
-- The one-rule script (overrides off) takes the commands of a plain counter:
--   first in a window  INCR (INCRBY for a cost above 1), then PEXPIRE
--   later              INCR
--   denied             INCR. When the window was already full, the overshoot is harmless (full
--                      either way, remaining 0) and stays; only a partial window denied by a large
--                      cost is put back (DECRBY).
-- The check (several rules, a peek, a cost above the limit, a reservation): GET, then on commit
-- INCRBY (SET PX for a new key). A check reads an overshoot as a full window.
--
-- Counting (the rule's third parameter, src/engine/algorithms/shared.ts's CountingOptions): 1
-- (overshoot) counts a denied charge as well: the one-rule script keeps it (no DECRBY), the check
-- counts it up to 4 limits in all (a settle's debt cap; a peek never); 2 (gives back) admits every decision and takes its cost off the count, which
-- may go below zero: a credit the next charges use first, `remaining` above the limit meanwhile.
--
-- This file is the algorithm's one source; scripts/build-lua.mjs cuts it at its `-- #` lines:
-- state (shared by every path), check (the limiter script), one-rule (a script of its own), refund.

-- #state
-- The key outlives its window by min(window, GRACE) ms. src/engine/algorithms/fixed-window.ts computes the one-rule
-- script's expiry with it too (scripts/build-lua.mjs hands it over as ALGORITHM_CONSTANTS).
local GRACE = 60000

-- The window's count; nil when the key holds none. Only what INCRBY takes is a count: tonumber() also
-- reads "1.5", "1e3" or " 3", on which the commit's INCRBY would fail midway, after other rules.
local function read(key)
  local stored = redis.call("GET", key)
  local count = tonumber(stored)
  if count and string.format("%d", count) == stored then return count end
  return nil
end

-- Counts `units` more in the window starting at `start` (holding `count`): the check's commit, and a
-- settle's debt. Returns the window's end (the reset) and its start (the window counted in).
local function commit(key, now, units, _, window, _, start, count)
  local ends = start + window
  -- (a count below zero is a credit a rule that gives back left: kept)
  if count ~= 0 then
    redis.call("INCRBY", key, units)
  else
    redis.call("SET", key, units, "PX", ends + math.min(window, GRACE) - now)
  end
  return ends, start
end

-- #check

-- A rule that gives back: the cost comes off the count (commit with units below zero).
local function give_back(key, now, units, p1, window, p3, start, count)
  return commit(key, now, -units, p1, window, p3, start, count)
end

algorithms.fixedWindow = function(key, now, cost, limit, window, counting)
  local start = now - now % window
  -- a value that is no count (not this version's) reads as a new window, which the commit SETs
  local count = read(key) or 0
  local ends = start + window
  local room = limit - count
  local reset_at = count > 0 and ends or now
  if counting == 2 then
    -- admitted whatever the count; the dispatcher answers room - cost: what is left after the refund
    return math.max(room + 2 * cost, cost), reset_at, 0, give_back, start, count
  end
  if cost > room then
    -- overshoot, up to 4 limits in all; A[2] is the call's cost as sent: "0" for a peek, never counted
    if counting == 1 and A[2] ~= "0" then
      local units = math.min(cost, 4 * limit - count)
      if units > 0 then commit(key, now, units, limit, window, 0, start, count) end
    end
    return room, reset_at, cost > limit and NEVER or ends - now
  end
  return room, reset_at, 0, commit, start, count
end

-- #one-rule
-- One rule, cost 1..limit, no reservation. KEYS[1] the window's key; ARGV[1] ms until the key
-- expires (the window's end plus its grace, from the caller's clock); ARGV[2], ARGV[3] cost and limit,
-- when the cost is more than 1 (no limit with overshoot: a denied charge stays counted). Answers the
-- window's count after adding the cost: admitted iff count <= limit.
local key, units = KEYS[1], ARGV[2]
local cost = units and tonumber(units) or 1
local count = units and redis.pcall("INCRBY", key, units) or redis.pcall("INCR", key)
if count == cost then
  redis.call("PEXPIRE", key, ARGV[1])
elseif type(count) ~= "number" then
  -- a string that is no count (not this version's) starts the window afresh, as the check does;
  -- other errors (a key of another type) stand
  if not string.find(count.err, "not an integer", 1, true) then return redis.error_reply(count.err) end
  redis.call("SET", key, units or "1", "PX", ARGV[1])
  count = cost
end
-- a window a large cost overshot gets the cost back (its remaining units stay usable); once the
-- window is full the overshoot is harmless (full either way) and stays, saving the DECRBY
if units and ARGV[3] then
  local limit = tonumber(ARGV[3])
  if count > limit and count - cost < limit then redis.call("DECRBY", key, units) end
end
return count

-- #one-rule-overrides
-- The one-rule script with overrides on, a template run behind the engine's head of the call's plan
-- (lua/one_rule_overrides.lua says why): T the plan table (lua/override.lua), P1..P3 the rule's limit,
-- window and counting, MINE the pattern of a custom line in its window. KEYS[1] the window's key
-- under the call's plan; KEYS[2] the override key; KEYS[3..] keys of other windows some plan gives
-- this rule. ARGV[1] ms until KEYS[1] expires;
-- ARGV[2] the cost, when more than 1 (or when ARGV[3] follows); ARGV[3], with KEYS[3..] only, now
-- (hexadecimal). One MGET reads every count this call may use and the stored override (all keys share
-- the identifier's hash tag); then only an admission writes, so the count is exactly what was admitted
-- whatever limit applies next (first: MGET SET; later: MGET INCR; denied: MGET). The count after
-- adding the cost (admitted iff count <= the applied limit) comes back as count * 64 + the tag of the
-- plan applied (lua/override.lua; 0: nothing stored), as count * 2^22 + the tag of a custom line that
-- changes one parameter by little, or, for a custom or stale override, a plan past the 62nd or a
-- count beyond 2^47, as a string: the count in decimal, then the reader's answer (lua/override.lua's
-- one-rule reader, inline here), or "#<tag>" for a plan's tag the count leaves no room for.
-- Costs, as Redis runs it: a global (KEYS, ARGV, string) costs about 2 local reads, each call of a
-- function (string.*, tonumber) or arithmetic on a string (a conversion) about 20 instructions: so the
-- arguments are read once into locals, each only on the path that uses it, and the count is read from
-- its bytes (below).
local K, A, call = KEYS, ARGV, redis.call
local key = K[1]
-- (the usual two keys named: unpack() is a call more)
local values = K[3] and call("MGET", unpack(K)) or call("MGET", key, K[2])
local value, stored, units = values[1], values[2], A[2]
local limit, digits, ttl, tag, answer, count = P1, P1, nil, 0, nil, nil
local own1, own2, own3, p1, p2, p3, k, p1s
if stored then
  own1, own2, own3 = P1, P2, P3
-- #override
  limit, digits = p1, p1s
  if k ~= 0 then
    local now, window = tonumber(A[3], 16), tonumber(p2)
    key, value = K[k], values[k]
    ttl = now - now % window + window + math.min(window, GRACE) - now
  end
end
-- The usual decision, a cost of 1 (none sent) and a count below the limit: the unit is taken. The
-- count and the limit are compared as the digits they are written in (fewer, or as many and less: no
-- call to read either); a value INCR refuses (not this version's) goes the long way below, which
-- reads it. (INCR, not INCRBY 1: an argument less for Redis to make.)
if digits and not units and value and (#value < #digits or #value == #digits and value < digits) then
  count = redis.pcall("INCR", key)
  if type(count) ~= "number" then
    count = nil
  elseif not stored and count < 140737488355328 then
    return count * 64
  end
end
if not count then
  -- (digits, as the engine writes them, or a number the reader read: arithmetic makes them numbers
  -- with no call)
  limit = limit + 0
  units = units or "1"
  local cost = units == "1" and 1 or units + 0
  -- only what INCRBY takes is a count (as read() in #state says): an integer without leading zeros, of
  -- at most 15 digits (an exact double); anything else starts the window afresh. One or two characters
  -- (a count below 100) are read from their bytes, one call; longer ones are matched, then converted.
  if value then
    if #value < 3 and #value > 0 then
      local a, b = string.byte(value, 1, 2)
      a = a - 48
      if not b then
        if a >= 0 and a <= 9 then count = a end
      else
        b = b - 48
        -- two digits, the first from 1; or a minus (45 - 48 = -3) and a digit from 1
        if b >= 0 and b <= 9 then
          if a >= 1 and a <= 9 then
            count = a * 10 + b
          elseif a == -3 and b >= 1 then
            count = -b
          end
        end
      end
    elseif #value < 16 and string.find(value, "^%-?[1-9]%d*$") then
      count = value + 0
    end
  end
  if count and count + cost <= limit then
    count = cost == 1 and call("INCR", key) or call("INCRBY", key, units)
  elseif count then
    count = count + cost
  else
    if cost <= limit then call("SET", key, units, "PX", ttl or A[1]) end
    count = cost
  end
end
-- a custom line's tag, with room for it (lua/override.lua); else the line's parameters
if tag >= 63 then
  if count < 2147483648 and count > -2147483648 then return count * 4194304 + tag end
  answer = string.format("!%s %s %s", p1, p2, p3)
end
if not answer and count < 140737488355328 and count > -140737488355328 then return count * 64 + tag end
if not answer then return string.format(stored and "%d#%d" or "%d", count, tag) end
return string.format("%d%s", count, answer)

-- #refund
-- The window's count, in the key of the window the units were counted in. A count above the limit
-- (a denial's harmless overshoot) counts as the limit. The key keeps its expiry.
refund.fixedWindow = function(key, _, units, limit)
  local count = read(key)
  if not count then return false end
  redis.call("SET", key, math.max(0, math.min(count, limit) - units), "KEEPTTL")
  return true
end

-- #settle
-- Below the reservation: the refund above, in the window the units were counted in (KEYS: its key),
-- while that window lasts; nothing once it has ended. Above: the extra is counted in the window of the
-- settle's own clock (KEYS: its key), past the limit if need be (a debt, waited out until that window
-- ends), up to DEBT_CAP times the limit (lua/settle.lua).
settle.fixedWindow = function(key, now, cost, actual, limit, window, _, start)
  if actual < cost then
    if now >= start + window then return false end
    return refund.fixedWindow(key, now, cost - actual, limit)
  end
  local count = read(key) or 0
  local units = math.min(actual - cost, DEBT_CAP * limit - count)
  if units <= 0 then return false end
  commit(key, now, units, 0, window, 0, now - now % window, count)
  return true
end
