-- The fixed window's shortcut (see lua/algorithms/fixed_window.lua): one rule, cost 1..limit, no
-- reservation. It is the first thing the limiter script runs (scripts/build-lua.mjs puts lua/shortcut/
-- before the prelude), so a call taking it parses only what it uses and builds no table or closure.
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
    if count <= 0 or count > SPAN then
      local newer = ((index + 1) % 3 + 1) * SPAN
      count = value - newer
      if count > 0 and count <= SPAN then
        start = start + window
      else
        redis.call("SET", key, stamp + cost, "PX", start + window - now)
        count = cost
      end
    end
    local ends = start + window
    if count <= limit then return { 1, limit - count, ends, 0 } end
    local before = count - cost
    if before < limit or count >= SPAN / 2 then redis.call("DECRBY", key, ARGV[2]) end
    return { 0, math.max(0, limit - before), ends, ends - now }
  end
end

