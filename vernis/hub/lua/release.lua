-- Let go of a lease, only if it still holds the given value (not taken over meanwhile).
--
-- KEYS[1]: the lease. ARGV[1]: its value. Reply: 1 released, 0 not.

if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
