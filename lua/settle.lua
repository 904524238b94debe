-- Settles one decision: charges what it really cost instead of what it reserved, under every rule of
-- one identifier, in one call. The Limiter sends it at most once per decision.
--
-- KEYS[i]  the state key of rule i: a fixed window's is the key of the window the units were counted in
--          when giving back, of the settle's own window when charging more
-- ARGV[1]  now, epoch ms, from the caller's clock, in hexadecimal
-- ARGV[2]  cost, the units the decision took (whole, >= 0)
-- ARGV[3]  actual, the units it really cost (whole, >= 0, not equal to cost)
-- ARGV[4 + 6(i-1) ..]  rule i: algorithm name, its three integer parameters (as the limiter script
--          takes them), where the decision counted its units (the window's start, the sliding log's
--          stamp; for gcra the TAT they hold, its resetAt) and, for a sliding log, the count before
--          its entries (for gcra the time the decision counted from, or 0; else 0); giving back, gcra
--          reads and writes the ledger beside its state, "<key>:given" (lua/algorithms/gcra.lua)
--
-- Each algorithm's settle section (lua/algorithms/*.lua) registers settle.<name>(key, now, cost, actual,
-- p1, p2, p3, start, mark, p1 as sent, p2 as sent): below the cost it gives the difference back where
-- the units were counted (most through the algorithm's refund section); above it charges the extra
-- even past the limit (a debt), up to a bound each states. scripts/build-lua.mjs puts them where
-- `-- #settles` stands, each with its algorithm's state and refund sections (a debt is written by the
-- commit the state section shares with the check). Nothing is created to give units back to; no stored time moves back.
-- Returns the number of rules whose state changed.
local now = tonumber(ARGV[1], 16)
local cost, actual = tonumber(ARGV[2]), tonumber(ARGV[3])
local refund, settle = {}, {}
-- A debt takes a rule at most this many times its limit in all (gcra: its burst): the wait, the key's
-- expiry and a sliding log's entries stay bounded, and every product stays exact (4 * 2^50 < 2^53).
local DEBT_CAP = 4

-- #settles

local done = 0
for i = 1, #KEYS do
  local at = 4 + 6 * (i - 1)
  if settle[ARGV[at]](KEYS[i], now, cost, actual, tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]),
      tonumber(ARGV[at + 3]), tonumber(ARGV[at + 4]), tonumber(ARGV[at + 5]), ARGV[at + 1],
      ARGV[at + 2]) then
    done = done + 1
  end
end
return done
