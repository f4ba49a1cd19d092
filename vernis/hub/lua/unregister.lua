-- An instance no longer shows these conversations: its entries among their subscribers go.
--
-- ARGV[1]: the key prefix `P`; ARGV[2]: the instance; ARGV[3..]: the conversations' ids. Reply: 1.

for i = 3, #ARGV do redis.call('ZREM', ARGV[1] .. '{c:' .. ARGV[i] .. '}:subs', ARGV[2]) end
return 1
