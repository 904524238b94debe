-- A reentrant lock with a lease and a fencing token, one HASH per lock name.
--
-- KEYS[1]  the lock's HASH: owner, count (reentrancy depth), expires (epoch ms, caller's clock), fence
-- ARGV[1]  "acquire" | "release" | "extend"
-- ARGV[2]  now, epoch ms, from the caller's clock
-- ARGV[3]  owner (already encoded by the caller: printable, at most 129 bytes)
-- ARGV[4]  lease, ms (acquire, extend)
-- ARGV[5]  margin, ms: how long the fence outlives the lock (see below)
-- ARGV[6]  acquire: attempt id, the same for every try of one acquire() call;
--          release: release id, the same for every try of one release() call
--
-- Returns { ok (1/0), fence, count, expires }:
--   acquire  ok 1: held by owner now (count 1 is a fresh hold with a new fence, more is a re-entry);
--            ok 0: held by someone else until `expires` (fence and count 0)
--   release  ok 1: count is the depth left (0: the lock is free); ok 0: owner did not hold it
--   extend   ok 1: held until `expires`; ok 0: owner does not hold it (any more)
--
-- A try whose answer was lost (a timeout) may still have taken the lock. The owner's next try of the
-- same acquire() call carries the same attempt id and is answered as the first was, not counted as a
-- re-entry: otherwise the hold would be one level deeper than its owner knows, and never freed.
-- Likewise a release tried again after a lost answer is answered as the first was, not taken as a
-- second level given back (the id of the last release stays in the hash, beside the fence).
--
-- The lease is judged by the caller's clock (the stored `expires`), never by Redis's: a hold whose
-- `expires` has passed is lost, whoever asks, and the next acquire takes it over with a new fence.
--
-- Fencing token. A fresh hold gets fence = max(stored fence + 1, now). While the HASH lives, the
-- stored fence makes each token larger than the last. The HASH carries a TTL all the same, of
-- max(expires, fence) - now + margin, refreshed by every write (release keeps the fence, drops the
-- rest). So when it has expired, at least `margin` ms have passed since the largest fence it held
-- stopped being the future: the next token, `now`, is larger, as long as no caller's clock runs more
-- than `margin` ms behind the clock of the caller who wrote it. Tokens track the caller's clock, and
-- run ahead of it only while holders follow each other more than once a millisecond.
-- A script of its own (the limiter's prelude is not part of it), hence its own int(): Lua's own
-- number-to-string conversion keeps only 14 digits, and what is stored must round-trip exactly.
local function int(x)
  return string.format("%d", x)
end

local key = KEYS[1]
local op = ARGV[1]
local now = tonumber(ARGV[2])
local owner = ARGV[3]
local margin = tonumber(ARGV[5])

local state = redis.call("HMGET", key, "owner", "count", "expires", "fence", "attempt", "released")
local holder = state[1]
local count = tonumber(state[2]) or 0
local expires = tonumber(state[3]) or 0
local fence = tonumber(state[4]) or 0
-- a lease that ran out is no hold at all, for its owner as for anyone else
if holder and expires <= now then holder = false end

local function keep(until_)
  redis.call("PEXPIRE", key, math.max(until_, fence) - now + margin)
end

if op == "acquire" then
  local lease = tonumber(ARGV[4])
  local attempt = ARGV[6]
  if holder and holder ~= owner then return { 0, 0, 0, expires } end
  if holder and state[5] == attempt then
    -- this try's earlier twin got through: same hold, same depth
    expires = math.max(expires, now + lease)
    redis.call("HSET", key, "expires", int(expires))
  elseif holder then
    count = count + 1
    expires = math.max(expires, now + lease)
    redis.call("HSET", key, "count", int(count), "expires", int(expires), "attempt", attempt)
  else
    fence = math.max(fence + 1, now)
    count = 1
    expires = now + lease
    redis.call(
      "HSET", key, "owner", owner, "count", 1, "expires", int(expires), "fence", int(fence), "attempt", attempt
    )
  end
  keep(expires)
  return { 1, fence, count, expires }
end

if op == "release" then
  local id = ARGV[6]
  -- this try's earlier twin got through: it was given back already
  if state[6] == id then return { 1, fence, holder == owner and count or 0, holder == owner and expires or now } end
  if holder ~= owner then return { 0, 0, 0, 0 } end
  count = count - 1
  if count > 0 then
    redis.call("HSET", key, "count", int(count), "released", id)
    return { 1, fence, count, expires }
  end
  redis.call("HDEL", key, "owner", "count", "expires", "attempt")
  redis.call("HSET", key, "released", id)
  keep(now)
  return { 1, fence, 0, now }
end

if holder ~= owner then return { 0, 0, 0, 0 } end

if op == "extend" then
  expires = math.max(expires, now + tonumber(ARGV[4]))
  redis.call("HSET", key, "expires", int(expires))
  keep(expires)
  return { 1, fence, count, expires }
end

error("edgelimit: unknown lock operation " .. tostring(op))
