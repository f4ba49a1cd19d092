-- The conversation's last seq; when it has none, one is started from Redis's clock in microseconds
-- (so seqs keep growing when the key expires or Redis restarts) and kept for the replay window.
--
-- KEYS[1]: the conversation's seq (`P{c:C}:seq`). ARGV[1]: the replay window (ms).
-- Reply: the seq, as text.

local seq = redis.call('GET', KEYS[1])
if seq then return seq end
local t = redis.call('TIME')
seq = string.format('%d', t[1] * 1000000 + t[2])
redis.call('SET', KEYS[1], seq, 'PX', ARGV[1])
return seq
