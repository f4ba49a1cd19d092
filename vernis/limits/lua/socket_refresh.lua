-- Keep a socket's entry among its member's from lapsing (an entry already gone is not added).
--
-- KEYS[1]: the member's sockets. ARGV[1]: the entry's time to live (ms); ARGV[2]: the socket's id.
-- Reply: 1.

local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[1]), ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
