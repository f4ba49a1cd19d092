-- Count a socket among its member's, on every instance, if the member has fewer than the cap: ids
-- in a sorted set, scored by when they lapse unless refreshed (lapsed ones are dropped first).
--
-- KEYS[1]: the member's sockets. ARGV[1]: the cap; ARGV[2]: the entry's time to live (ms);
-- ARGV[3]: the socket's id. Reply: 1 counted, 0 at the cap.

local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
