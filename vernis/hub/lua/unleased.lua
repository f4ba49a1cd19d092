-- The conversations with an answer in flight whose lease lapsed (their instance died), in one call:
-- the reaper of every instance asks this, not each conversation's lease in turn.
--
-- KEYS[1]: the running set (`P:running`). ARGV[1]: the key prefix `P`. Reply: their ids.

local out = {}
for _, cid in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if redis.call('EXISTS', ARGV[1] .. '{c:' .. cid .. '}:lease') == 0 then out[#out + 1] = cid end
end
return out
