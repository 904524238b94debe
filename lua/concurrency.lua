-- A concurrency limit: at most `limit` holders of one identifier at once, each holding a slot until it
-- releases it or its lease runs out. One sorted set per identifier: lease id -> the epoch ms (caller's
-- clock) at which that lease runs out. A crashed holder never releases; its entry is trimmed once its
-- lease has passed, so no slot leaks for longer than one lease.
--
-- KEYS[1]  the identifier's sorted set
-- ARGV[1]  "acquire" | "release"
-- ARGV[2]  now, epoch ms, from the caller's clock
-- ARGV[3]  lease id (random, chosen by the caller)
-- ARGV[4]  limit (acquire)
-- ARGV[5]  lease, ms (acquire)
--
-- acquire returns { allowed (1/0), remaining, retryAfter ms, held }: remaining slots after this one;
--   retryAfter, on a refusal, until the first lease runs out (the latest a slot is sure to be free;
--   holders usually release sooner); held, the holders counted before this request.
-- release returns 1 when the lease still held a slot, 0 when it had run out or was released before.
local key = KEYS[1]
local op = ARGV[1]
local now = tonumber(ARGV[2])
local id = ARGV[3]

if op == "release" then return redis.call("ZREM", key, id) end

if op == "acquire" then
  local limit = tonumber(ARGV[4])
  local lease = tonumber(ARGV[5])
  redis.call("ZREMRANGEBYSCORE", key, "-inf", now)
  local held = redis.call("ZCARD", key)
  if held >= limit then
    local first = redis.call("ZRANGE", key, 0, 0, "WITHSCORES")
    return { 0, 0, math.max(1, tonumber(first[2]) - now), held }
  end
  redis.call("ZADD", key, string.format("%d", now + lease), id)
  -- The set lives as long as its longest lease. GT keeps a longer TTL (a lease configured longer
  -- elsewhere), but treats a key without one as immortal: a set just created (held 0) gets it plainly.
  if held == 0 then
    redis.call("PEXPIRE", key, lease)
  else
    redis.call("PEXPIRE", key, lease, "GT")
  end
  return { 1, limit - held - 1, 0, held }
end

error("edgelimit: unknown concurrency operation " .. tostring(op))
