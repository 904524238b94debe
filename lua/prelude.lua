-- The limiter script: a head defining A, K and n (below), this file, then each lua/algorithms/*.lua's state and check sections (each
-- inside `if several or A[3] == "<name>" then ... end`, so a call with one rule defines only its
-- own algorithm), then lua/dispatcher.lua. It serves every call the one-rule scripts do not: several rules, a
-- peek, a cost above what the rule can ever admit, a reservation, a sliding log.
--
-- KEYS[i]  the state key of rule i (a fixed window's: its window's; all keys of a call share one cluster
--          hash tag)
-- ARGV[1]  now, epoch ms, from the caller's clock, in hexadecimal (cheaper for Redis to parse than a
--          13-digit decimal; the clock is never negative: see Limiter)
-- ARGV[2]  cost, a whole number of units; 0 peeks (answers for a cost of 1, writes nothing)
-- ARGV[3 + 4(i-1) ..]  rule i: algorithm name, then three integer parameters (0 where unused)
--
-- The script reads them as A (arguments), K (keys) and n (rules), which a head defines before this
-- file: `local A, K, n = ARGV, KEYS, #KEYS` in the plain script; in limiterOverrides,
-- lua/overrides.lua, which may put a stored override's parameters and keys in their place.
--
-- THE CONTRACT. Each algorithm's check section registers one function, algorithms.<name> (its line
-- starts unindented: scripts/build-lua.mjs looks for it there):
--
--   algorithms.<name>(key, now, cost, p1, p2, p3) reads the rule's state, writes nothing, and returns
--     room         units the rule could take now: `cost` is admitted iff cost <= room
--     reset_at     epoch ms when the rule is back to its full limit, as the state stands
--     retry_after  when cost > room: ms until `cost` units could be taken (NEVER if never: -1, defined
--                  with the constants the engine shares, scripts/build-lua.mjs); else 0
--     commit, ...  how to take units: the dispatcher calls commit(key, now, units, p1, p2, p3, ...)
--                  with the values that follow it (the algorithm's own, at most four)
--
--   commit(...) writes the state for `units` more taken (0 < units <= room) and returns the new
--     reset_at and the start of the window the units were counted in (gcra: the TAT they hold, its
--     reset_at, which caps what a refund gives back). Remaining is then room - units: every algorithm counts whole units. A commit runs
--     only once every rule has admitted, and must not fail: Redis does not undo a script's writes
--     when it errors midway, so everything that can fail happens in the check.
--
-- Redis runs scripts one at a time, and this one on every decision: the scripts keep helpers few,
-- answer integers where they can, and format numbers for redis.call() with string.format("%d")
-- (BENCHMARKS.md has what each costs). All arithmetic is on integers (Lua doubles are exact below
-- 2^53; the rule constructors keep every product below 2^50). To put a number inside a string use
-- string.format("%d"), never `..`: Lua's own conversion keeps only 14 digits.
local now = tonumber(A[1], 16)
-- the usual cost of 1 without parsing it
local cost = A[2] == "1" and 1 or tonumber(A[2])
local algorithms = {}

-- A call with one rule defines only that rule's algorithm; a call with several defines them all.
local several = n > 1
