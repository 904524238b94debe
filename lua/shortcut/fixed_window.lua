-- The fixed window's shortcut (see lua/algorithms/fixed_window.lua): one rule, cost 1..limit, no
-- reservation. It is the first thing the limiter script runs (scripts/build-lua.mjs puts lua/shortcut/
-- before the prelude), so a call taking it parses only what it uses and builds no table or closure.
-- It answers one integer, not the dispatcher's 4 (a table costs Redis about 1.3 µs more, measured):
--   admitted  count * 2 + newer            (count after this call, >= 1)
--   denied    -(before * 2 + newer) - 1    (count before this call)
-- newer is 1 when a lagging caller was counted in the next window, else 0. The Limiter knows now,
-- the limit and the window, and derives remaining, resetAt and retryAfter from them.
local SPAN = 2 ^ 51

if #KEYS == 1 and ARGV[3] == "fixedWindow" and not ARGV[7] then
  local cost = ARGV[2] == "1" and 1 or tonumber(ARGV[2])
  local limit, window = tonumber(ARGV[4]), tonumber(ARGV[5])
  if cost >= 1 and cost <= limit then
    local now = tonumber(ARGV[1], 16)
    local key = KEYS[1]
    local start = now - now % window
    local index = start / window
    local stamp = (index % 3 + 1) * SPAN
    local value = redis.pcall("INCRBY", key, ARGV[2])
    if type(value) ~= "number" then
      -- a string that is no integer (another version's state) starts afresh below; other errors stand
      if not string.find(value.err, "not an integer", 1, true) then return redis.error_reply(value.err) end
      value = 0
    end
    local count = value - stamp
    local newer = 0
    if count <= 0 or count > SPAN then
      count = value - ((index + 1) % 3 + 1) * SPAN
      if count > 0 and count <= SPAN then
        start, newer = start + window, 1
      else
        redis.call("SET", key, stamp + cost, "PX", start + window - now)
        count = cost
      end
    end
    if count <= limit then return count * 2 + newer end
    local before = count - cost
    if before < limit or count >= SPAN / 2 then redis.call("DECRBY", key, ARGV[2]) end
    return -(before * 2 + newer) - 1
  end
end

