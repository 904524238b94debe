-- The fixed window's shortcut (see lua/algorithms/fixed_window.lua): one rule, cost 1..limit, no
-- reservation. It is the first thing the limiter script runs (scripts/build-lua.mjs puts lua/shortcut/
-- before the prelude), so a call taking it parses only what it uses and builds no table or closure.
-- It has a layout of its own, told apart by having fewer than 4 arguments (the general one has 6 or more):
--   KEYS[1]  the window's key (the Limiter names it: the rule's key, ":", the window's index)
--   ARGV[1]  ms until the key expires (the window's end plus its grace, from the caller's clock)
--   ARGV[2], ARGV[3]  cost and limit, when the cost is more than 1
-- It answers the window's count after adding the cost; the Limiter admits iff count <= limit, and
-- knows now, the limit and the window, so it derives remaining, resetAt and retryAfter from it.
-- Commands: INCR (INCRBY), and PEXPIRE when the key is new, as a plain counter takes.
if not ARGV[4] then
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
  if units then
    local limit = tonumber(ARGV[3])
    if count > limit and count - cost < limit then redis.call("DECRBY", key, units) end
  end
  return count
end
