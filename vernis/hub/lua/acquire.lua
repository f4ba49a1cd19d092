-- Take a conversation's answer lease if nobody holds it, and record its taker as the
-- conversation's last writer.
--
-- KEYS[1]: the lease (`P{c:C}:lease`); KEYS[2]: the last writer (`P{c:C}:w`).
-- ARGV[1]: the lease's value; ARGV[2]: its time to live (ms); ARGV[3]: the last writer's (ms).
-- Reply: taken, the previous last writer ('' if unknown); held by another, nil.

if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return false end
local previous = redis.call('GET', KEYS[2])
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[3])
return previous or ''
