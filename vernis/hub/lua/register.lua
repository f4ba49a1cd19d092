-- An instance shows these conversations (or still shows them): its entry among each one's
-- subscribers (`P{c:C}:subs`, scored by when it lapses) is set or renewed, and lapsed entries (of
-- instances that died) are dropped on the way.
--
-- ARGV[1]: the key prefix `P`; ARGV[2]: the instance; ARGV[3]: its entry's time to live (ms);
-- ARGV[4..]: the conversations' ids. Reply: 1.

local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local ttl = tonumber(ARGV[3])
for i = 4, #ARGV do
  local key = ARGV[1] .. '{c:' .. ARGV[i] .. '}:subs'
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  redis.call('ZADD', key, now + ttl, ARGV[2])
  redis.call('PEXPIRE', key, ttl)
end
return 1
