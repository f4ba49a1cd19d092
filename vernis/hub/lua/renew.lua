-- Renew every lease an instance holds, in one call; a lease another holder took is left alone.
--
-- KEYS: the leases. ARGV[1]: their time to live (ms); ARGV[2..]: each lease's value, in KEYS' order.
-- Reply: per lease, 1 renewed, 0 taken over.

local out = {}
for i, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[i + 1] then
    redis.call('PEXPIRE', key, ARGV[1])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
