-- Shared by every algorithm file. The build sends one script: lua/shortcut/*.lua (single-rule paths
-- that run before anything else), this file, then lua/algorithms/*.lua, then lua/dispatcher.lua.
--
-- KEYS[i]  the state key of rule i (a fixed window's: its window's; all keys of a call share one cluster
--          hash tag)
-- ARGV[1]  now, epoch ms, from the caller's clock, in hexadecimal (a 13-digit decimal strtod costs
--          about 0.2 µs more per call, measured; the clock is never negative: see Limiter)
-- ARGV[2]  cost, a whole number of units; 0 peeks (answers for a cost of 1, writes nothing)
-- ARGV[3 + 4(i-1) ..]  rule i: algorithm name, then up to three integer parameters
--
-- THE CONTRACT. Each algorithm file registers one function, algorithms.<name>, the check (its line
-- starts unindented, even inside the file's `if`: scripts/build-lua.mjs looks for it there):
--
--   algorithms.<name>(key, now, cost, p1, p2, p3) reads the rule's state, writes nothing, and returns
--     room         units the rule could take now: `cost` is admitted iff cost <= room
--     reset_at     epoch ms when the rule is back to its full limit, as the state stands
--     retry_after  when cost > room: ms until `cost` units could be taken (NEVER if never); else 0
--     commit, ...  how to take units: the dispatcher calls commit(key, now, units, ...) with the
--                  values that follow it (the algorithm's own, named where it returns them)
--
--   commit(key, now, units, ...) writes the state for `units` more taken (0 < units <= room) and
--     returns the new reset_at. Remaining is then room - units: every algorithm counts whole units.
--     A commit runs only once every rule has admitted, and must not fail: Redis does not undo a
--     script's writes when it errors midway, so everything that can fail happens in the check.
--
-- A call with one rule, no reservation and a cost from 1 to what the rule can ever admit takes its
-- algorithm's shortcut (lua/shortcut/*.lua) when it has one: straight-line code answering one
-- integer, which the Limiter decodes (src/engine/shortcuts.ts). The fixed window's has arguments of
-- its own; gcra's (the token bucket's too) and the sliding window's (limit below 2^25) read the ones
-- above. A peek, a larger cost, several rules or a sliding log come here. The shortcuts must agree
-- with the algorithm files, state for state (test/engine/scripts.test.ts runs both on one history).
--
-- REDIS TIME. This script runs on every decision, and Redis runs scripts one at a time. Measured on
-- Redis 7.0 (`node --import tsx bench/lua-redis-benchmark.ts --micro`, µs per EVALSHA): a table
-- reply costs about 0.5 more than an integer one; a number handed to redis.call() is formatted with
-- "%.17g", about 0.27 per argument, string.format("%d") about half that, and an ARGV string passed
-- through nothing; each tonumber() about 0.15; a closure about 0.02. So an algorithm file defines its
-- functions only when this call's only rule uses it (`if several or ARGV[3] == "<name>" then`),
-- helpers stay few, and the shortcuts answer integers and pass strings.
--
-- All arithmetic is on integers (Lua doubles are exact below 2^53; the rule constructors keep every
-- product below 2^50). A number handed to redis.call() is sent exactly (integers below 2^53 print in
-- full); to put one inside a string use string.format("%d"), never `..` on a number:
-- Lua's own conversion keeps only 14 digits.
local NEVER = -1
local now = tonumber(ARGV[1], 16)
-- the usual cost of 1 without parsing it (each tonumber() is a strtod(), about 0.15 µs)
local cost = ARGV[2] == "1" and 1 or tonumber(ARGV[2])
local algorithms = {}

-- A call with one rule defines only that rule's algorithm; a call with several defines them all.
local several = #KEYS > 1
