-- Publish one batch of events, of any number of conversations, in one call (the hub's publisher).
--
-- KEYS[1]: the set of conversations with an answer in flight (`P:running`).
-- ARGV[1]: the streams' length cap; ARGV[2]: the replay window (ms); ARGV[3]: the key prefix `P`;
-- ARGV[4]: the publishing instance; ARGV[5]: the batch; ARGV[6]: the batch's number at its instance.
--
-- The batch: one block per conversation (`\r` between), its first line the conversation's id, then
-- its events, one line each (`\n` between), each line: kind (`d` a text delta, `s` an answer's start,
-- `e` its end, `o` any other), extra (a start's message id, an end's lease), whether the frame takes
-- a seq (`1`/`0`) and the frame without its seq, `\t` between. A frame is JSON: a tab, a line break
-- or a carriage return in it is escaped, never raw. A frame that takes a seq ends with `"seq":`:
-- the seq given here, then `}`, complete it.
--
-- For each conversation, atomically: its events are numbered (`P{c:C}:seq`, started from Redis's
-- clock in microseconds), appended to its stream (`P{c:C}:ev`, trimmed by length and by age), the
-- answer in flight is recorded (`P{c:C}:fl`, and the running set), and an answer's end deletes its
-- lease if the lease still holds the value given as the end's extra. The keys expire with the
-- replay window. Then each other instance showing any of the batch's conversations
-- (`P{c:C}:subs`) gets one message on its channel (`P:i:<instance>`) holding all of their events,
-- in the batch's form, each line `seq\tkind\tframe`. The publishing instance gets no message.
--
-- Reply: the first seq given to each conversation's events, in the batch's order. The reply is
-- kept (`P:b:<instance>:<number>`, for the replay window): a batch sent again under the same
-- number gets that reply and is not run again.
--
-- The conversations' keys are named here, from the prefix: one batch spans many conversations, so
-- the script cannot run on a Redis Cluster.

local maxlen, ttl, prefix, self, payload = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
-- A batch sent again after its reply was lost: if Redis ran it, its record gives the same reply.
local record = prefix .. 'b:' .. self .. ':' .. ARGV[6]
local ran = redis.call('GET', record)
if ran then
  local again = {}
  for first in string.gmatch(ran, '%d+') do again[#again + 1] = tonumber(first) end
  return again
end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local horizon = now - tonumber(ttl)
local outbox, firsts = {}, {}
local find, sub = string.find, string.sub
local size, pos = #payload, 1
while pos <= size do
  local last = find(payload, '\r', pos, true)
  last = last and last - 1 or size
  local nl = find(payload, '\n', pos, true)
  local cid = sub(payload, pos, nl - 1)
  pos = last + 2
  local channel = prefix .. '{c:' .. cid .. '}'
  local seqk, evk, flk, leasek = channel .. ':seq', channel .. ':ev', channel .. ':fl', channel .. ':lease'
  local lines, at = {}, nl + 1
  while true do
    local e = find(payload, '\n', at, true)
    if e == nil or e > last then
      lines[#lines + 1] = sub(payload, at, last)
      break
    end
    lines[#lines + 1] = sub(payload, at, e - 1)
    at = e + 1
  end
  local n = #lines
  if redis.call('EXISTS', seqk) == 0 then
    redis.call('SET', seqk, string.format('%d', t[1] * 1000000 + t[2]))
  end
  local first = redis.call('INCRBY', seqk, n) - n + 1
  firsts[#firsts + 1] = first
  -- The other instances showing the conversation: each gets the events in its message.
  local others = {}
  for _, instance in ipairs(redis.call('ZRANGEBYSCORE', channel .. ':subs', now, '+inf')) do
    if instance ~= self then others[#others + 1] = instance end
  end
  local out = #others > 0 and {} or nil
  for i = 1, n do
    local line = lines[i]
    local t1 = find(line, '\t', 1, true)
    local t2 = find(line, '\t', t1 + 1, true)
    local kind, extra = sub(line, 1, t1 - 1), sub(line, t1 + 1, t2 - 1)
    local seq = string.format('%d', first + i - 1)
    local frame = sub(line, t2 + 3)
    if sub(line, t2 + 1, t2 + 1) == '1' then frame = frame .. seq .. '}' end
    redis.call('XADD', evk, 'MAXLEN', '~', maxlen, '*', 's', seq, 'k', kind, 'f', frame)
    if kind == 's' then
      redis.call('HSET', flk, 'm', extra, 's', seq)
      redis.call('SADD', KEYS[1], cid)
    elseif kind == 'e' then
      redis.call('DEL', flk)
      redis.call('SREM', KEYS[1], cid)
      -- The answer's lease goes with its end, in the same step: a client that reads the end and
      -- sends its next message at once must find the conversation free.
      if extra ~= '' and redis.call('GET', leasek) == extra then redis.call('DEL', leasek) end
    end
    if out then out[i] = seq .. '\t' .. kind .. '\t' .. frame end
  end
  if horizon > 0 then redis.call('XTRIM', evk, 'MINID', '~', string.format('%d', horizon)) end
  redis.call('PEXPIRE', seqk, ttl)
  redis.call('PEXPIRE', evk, ttl)
  if redis.call('EXISTS', flk) == 1 then redis.call('PEXPIRE', flk, ttl) end
  if out then
    local block = cid .. '\n' .. table.concat(out, '\n')
    for _, instance in ipairs(others) do
      local blocks = outbox[instance]
      if blocks == nil then outbox[instance] = {block} else blocks[#blocks + 1] = block end
    end
  end
end
for instance, blocks in pairs(outbox) do
  redis.call('PUBLISH', prefix .. 'i:' .. instance, table.concat(blocks, '\r'))
end
local texts = {}
for i, first in ipairs(firsts) do texts[i] = string.format('%d', first) end
redis.call('SET', record, table.concat(texts, ','), 'PX', ttl)
return firsts
