-- Publish one batch of events, of any number of conversations, in one call (the hub's publisher).
--
-- KEYS[1]: the set of conversations with an answer in flight (`P:running`).
-- ARGV[1]: the streams' length cap; ARGV[2]: the replay window (ms); ARGV[3]: how long the keys
-- live from a renewal (ms); ARGV[4]: the key prefix `P`; ARGV[5]: the publishing instance;
-- ARGV[6]: the batch; ARGV[7]: the batch's number at its instance; ARGV[8]: `1` to renew the keys
-- of every conversation of the batch (a batch sent again), else `0`.
--
-- The batch: one block per conversation (`\r` between), its first line the conversation's id (and
-- `\t1` after it when its keys are to be renewed: the publisher asks every few seconds), then
-- its events, one line each (`\n` between), each line: kind (`d` a text delta, `s` an answer's start,
-- `e` its end, `o` any other), extra (a start's message id, an end's lease), whether the frame takes
-- a seq (`1`/`0`) and the frame without its seq, `\t` between. A frame is JSON: a tab, a line break
-- or a carriage return in it is escaped, never raw. A frame that takes a seq ends with `"seq":`:
-- the seq given here, then `}`, complete it.
--
-- For each conversation, atomically: its events are numbered (`P{c:C}:seq`, started from Redis's
-- clock in microseconds), appended to its stream (`P{c:C}:ev`, trimmed by length), the answer in
-- flight is recorded (`P{c:C}:fl`, and the running set), and an answer's end deletes its lease if
-- the lease still holds the value given as the end's extra. When asked, and whenever the
-- conversation's seq is new, its keys are renewed (they expire ARGV[3] from then) and its stream
-- is trimmed by age (the replay window): not with every batch, for the cost of those calls in every
-- block of every batch. Then each other instance showing any of the batch's conversations
-- (`P{c:C}:subs`) gets one message on its channel (`P:i:<instance>`) holding all of their events,
-- in the batch's form, each line `seq\tkind\tframe`. The publishing instance gets no message.
--
-- Reply: the first seq given to each conversation's events, in the batch's order. The reply is
-- kept (`P:b:<instance>:<number>`, for the replay window): a batch sent again under the same
-- number gets that reply and is not run again.
--
-- The conversations' keys are named here, from the prefix: one batch spans many conversations, so
-- the script cannot run on a Redis Cluster.

local maxlen, window, keep, prefix, self, payload = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local renew_all = ARGV[8] == '1'
-- A batch sent again after its reply was lost: if Redis ran it, its record gives the same reply.
local record = prefix .. 'b:' .. self .. ':' .. ARGV[7]
local ran = redis.call('GET', record)
if ran then
  local again = {}
  for first in string.gmatch(ran, '%d+') do again[#again + 1] = tonumber(first) end
  return again
end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local horizon = now - tonumber(window)
local outbox, firsts = {}, {}
local find, sub = string.find, string.sub
local size, pos = #payload, 1
while pos <= size do
  local last = find(payload, '\r', pos, true)
  last = last and last - 1 or size
  local nl = find(payload, '\n', pos, true)
  local cid, renew = sub(payload, pos, nl - 1), renew_all
  local tab = find(cid, '\t', 1, true)
  if tab then cid, renew = sub(cid, 1, tab - 1), true end
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
  local newest = redis.call('INCRBY', seqk, n)
  if newest == n then
    -- A new conversation (or one whose keys lapsed): its seqs start from the clock.
    newest = t[1] * 1000000 + t[2] + n
    redis.call('SET', seqk, string.format('%d', newest))
    renew = true
  end
  local first = newest - n + 1
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
      redis.call('PEXPIRE', flk, keep)
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
  if renew then
    if horizon > 0 then redis.call('XTRIM', evk, 'MINID', '~', string.format('%d', horizon)) end
    redis.call('PEXPIRE', seqk, keep)
    redis.call('PEXPIRE', evk, keep)
    redis.call('PEXPIRE', flk, keep)
  end
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
redis.call('SET', record, table.concat(texts, ','), 'PX', window)
return firsts
