-- A sliding window in a sorted set, on Redis's clock (instances' clocks may differ): the hit is
-- recorded only when allowed.
--
-- KEYS[1]: the window. ARGV[1]: the limit; ARGV[2]: the window's length (ms); ARGV[3]: a unique id
-- for the hit. Reply: -1 allowed; else the milliseconds until the oldest hit leaves the window.

local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local window = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return math.max(1, tonumber(oldest[2]) + window - now)
end
redis.call('ZADD', KEYS[1], now, ARGV[3])
redis.call('PEXPIRE', KEYS[1], window)
return -1
