-- Gives back units a lease reserved and never handed out, under every rule of one identifier.
--
-- KEYS[i]  the state key of rule i, as the limiter script wrote it (a fixed window's: the key of the
--          window the units were counted in)
-- ARGV[1]  now, epoch ms, from the caller's clock, in hexadecimal
-- ARGV[2]  units to give back (whole, > 0)
-- ARGV[3]  when the reservation counted them (its `now`, in hexadecimal), or 0 when not known (a
--          regional pool written by a pool script that kept no reservation)
-- ARGV[4]  how many of that reservation's units these are, or were before some went to another
--          holder (a pool lends a lease part of its units, and their part with them: no two holders
--          count the same units); 0 with ARGV[3] known: all lent, what is left is bounded by the
--          refunds since. gcra reads its ledger from ARGV[3] on, so refunds made before the
--          reservation do not count against it (a rollback gives back exactly what it took) and
--          those after it do (a late refund mints nothing)
-- ARGV[5 + 5(i-1) ..]  rule i: algorithm name, its three integer parameters (as the limiter script
--          takes them), and the start of the window the units were counted in (for gcra the TAT
--          they held once taken, rounded up to a ms: units since earned back are not given back;
--          gcra also keeps, beside its state, a ledger of what its refunds gave back, "<key>:given")
--
-- Each algorithm's refund section (lua/algorithms/*.lua) registers refund.<name>(key, now, units, p1,
-- p2, p3, start, p1 as sent, p2 as sent, since, taken), which gives the units back where they were counted (the strings let gcra compare the rate its state was written under), and answers whether
-- there was a state to give them back to. scripts/build-lua.mjs puts them where `-- #refunds` stands,
-- each with its algorithm's state section. A state already gone (expired, reset) is left alone:
-- nothing is ever created, a key keeps its expiry or gets the one its new state needs, and no stored
-- time moves. Sliding log rules are never leased, so they are never refunded.
-- Returns the number of rules given back to.
local now = tonumber(ARGV[1], 16)
local units = tonumber(ARGV[2])
local since = tonumber(ARGV[3], 16)
local taken = tonumber(ARGV[4])
if since == 0 then taken = nil end
local refund = {}

-- #refunds

local done = 0
for i = 1, #KEYS do
  local at = 5 + 5 * (i - 1)
  local give = refund[ARGV[at]]
  if give and give(KEYS[i], now, units, tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]),
      tonumber(ARGV[at + 3]), tonumber(ARGV[at + 4]), ARGV[at + 1], ARGV[at + 2], since, taken) then
    done = done + 1
  end
end
return done
