"""The Lua scripts of the Redis long-term store (`helix_es.stores.redis.long_term`, which owns the keys
and documents them): apply on one server and per namespace on a cluster, get, a search page, erase."""

_ROWS = r"""
-- A namespace whose index began under this version (`by-session` set) also files each row in its
-- session's sorted set, `s:<session id>`, scored by offset: a retraction or an erasure then reads the
-- session's rows, not the namespace's index. `sessions` names the sessions filed, so a clear takes
-- the rows it dropped out of their sessions' sets too (a row dropped otherwise is passed over, and
-- forgotten, when met). Older namespaces scan, as before, until a rebuild.
local function add(base, index, op)
  if redis.call('EXISTS', base .. 'by-session') == 0 and redis.call('EXISTS', index) == 0 then
    redis.call('SET', base .. 'by-session', 1)
  end
  redis.call('SET', base .. 'm:' .. op[5], op[6])
  redis.call('ZADD', index, 0, op[5])
  if redis.call('EXISTS', base .. 'by-session') == 1 then
    redis.call('ZADD', base .. 's:' .. op[7], tonumber(op[2]), op[5])
    redis.call('SADD', base .. 'sessions', op[7])
  end
end

-- A clear (op: [kind, offset, namespace, at, bound]): its mark, then every row up to `bound` goes from
-- the index and from the sessions' sets. Its cost follows the rows the namespace holds.
local function clear(base, index, op)
  redis.call('SET', base .. 'cleared', op[4])
  while true do
    local gone = redis.call('ZRANGEBYLEX', index, '-', op[5], 'LIMIT', 0, 500)
    if #gone == 0 then break end
    local keys = {}
    for j = 1, #gone do keys[j] = base .. 'm:' .. gone[j] end
    redis.call('DEL', unpack(keys))
    redis.call('ZREM', index, unpack(gone))
  end
  local sessions = redis.call('SMEMBERS', base .. 'sessions')
  if redis.call('EXISTS', index) == 0 then  -- the clear took every row: every set goes whole
    for i = 1, #sessions do redis.call('DEL', base .. 's:' .. sessions[i]) end
    redis.call('DEL', base .. 'sessions')
    return
  end
  -- A member sorts below the bound's digits exactly when its time is up to the clear's.
  local limit = string.sub(op[5], 2)
  for i = 1, #sessions do
    local rows = base .. 's:' .. sessions[i]
    local members = redis.call('ZRANGE', rows, 0, -1)
    local stale = {}
    for j = 1, #members do
      if members[j] < limit then stale[#stale + 1] = members[j] end
    end
    if #stale == #members then
      redis.call('DEL', rows)
      redis.call('SREM', base .. 'sessions', sessions[i])
    else
      for j = 1, #stale, 500 do redis.call('ZREM', rows, unpack(stale, j, math.min(j + 499, #stale))) end
    end
  end
end

-- A retraction (op: [kind, offset, namespace, at, topic, session id, partition]): the session's newest
-- row on this partition before it (highest offset) goes, once: `retracted` remembers each retraction
-- applied, so a batch applied again (a cluster's checkpoint moves after the rows) takes back no more.
local function retract(base, index, op)
  if redis.call('HSETNX', base .. 'retracted', op[5] .. ':' .. op[7] .. ':' .. op[2], 1) == 0 then return end
  if redis.call('EXISTS', base .. 'by-session') == 1 then
    local rows = base .. 's:' .. op[6]
    local older = redis.call('ZREVRANGEBYSCORE', rows, '(' .. op[2], '-inf')
    for j = 1, #older do
      local t, p = string.match(older[j], '^%d+,(.*),(%d+),%d+$')
      if t == op[5] and tonumber(p) == tonumber(op[7]) then
        redis.call('ZREM', rows, older[j])
        if redis.call('DEL', base .. 'm:' .. older[j]) == 1 then
          redis.call('ZREM', index, older[j])
          return
        end
      end
    end
    return
  end
  local found = {}
  local members = redis.call('ZRANGE', index, 0, -1)
  for j = 1, #members do
    local t, p, o = string.match(members[j], '^%d+,(.*),(%d+),(%d+)$')
    if t == op[5] and tonumber(p) == tonumber(op[7]) and tonumber(o) < tonumber(op[2]) then
      found[#found + 1] = {tonumber(o), members[j]}
    end
  end
  table.sort(found, function(a, b) return a[1] > b[1] end)
  for j = 1, #found do
    local key = base .. 'm:' .. found[j][2]
    local value = redis.call('GET', key)
    if value and cjson.decode(value)['session_id'] == op[6] then
      redis.call('DEL', key)
      redis.call('ZREM', index, found[j][2])
      return
    end
  end
end
"""

APPLY = (
    _ROWS
    + r"""
local field, view = ARGV[1], ARGV[2]
local stored = redis.call('HGET', KEYS[1], field)
if not stored and ARGV[3] == '1' then
  return -1  -- the checkpoint this writer had seen is gone (FLUSHALL): so are the rows under it
end
local checkpoint = tonumber(stored or '-1')
local marks, applied, last = {}, 0, nil
-- One JSON argument of [kind, offset, namespace, at, member, value, session id] rows (numbers as text): one
-- argument to send, not six per event. A retraction's row is [kind, offset, namespace, at, topic,
-- session id, partition]; it scans the namespace's index, as retractions are rare.
local ops = cjson.decode(ARGV[4])
for n = 1, #ops do
  local op = ops[n]
  if tonumber(op[2]) > checkpoint then
    applied = applied + 1
    last = op[2]
    local base = 'helix:memory:' .. op[3] .. ':' .. view .. ':'
    local mark = marks[base]
    if mark == nil then
      mark = tonumber(redis.call('GET', base .. 'cleared') or '-1')
    end
    local at = tonumber(op[4])
    if op[1] == 'a' and at > mark then
      add(base, base .. 'index', op)
    elseif op[1] == 'c' and at > mark then
      mark = at
      clear(base, base .. 'index', op)
    elseif op[1] == 'r' then
      retract(base, base .. 'index', op)
    end
    marks[base] = mark
  end
end
if last then redis.call('HSET', KEYS[1], field, last) end
return applied
"""
)

# Both reads start so: {'wait', applied} while the checkpoint (KEYS[1], field ARGV[1]) is behind `want` (ARGV[2]).
_BEHIND = r"""
if ARGV[1] ~= '' then
  local applied = redis.call('HGET', KEYS[1], ARGV[1])
  if not applied or tonumber(applied) < tonumber(ARGV[2]) then return {'wait', applied or ''} end
end
"""

# Returns {'wait', applied} while the view is behind `want`, else {'ok', values...}.
GET = (
    _BEHIND
    + r"""
local out = {'ok'}
local members = redis.call('ZRANGE', KEYS[2], 0, -1)
for i = 1, #members, 500 do
  local keys = {}
  for j = i, math.min(i + 499, #members) do keys[#keys + 1] = ARGV[3] .. members[j] end
  local values = redis.call('MGET', unpack(keys))
  for k = 1, #values do
    if values[k] then out[#out + 1] = values[k] end
  end
end
return out
"""
)

# One page of a search: {'wait', applied}, or {'ok', last member read, members read, candidate values...}.
# KEYS[2]: the index; ARGV[3..]: from ('-' or '(' .. member), page size, needle, ascii, message key prefix.
# A page reads at most `PAGE` rows, so a search over a big namespace never holds Redis up for long.
PAGE_READ = (
    _BEHIND
    + r"""
local needle, ascii = ARGV[5], ARGV[6] == '1'
local members = redis.call('ZRANGEBYLEX', KEYS[2], ARGV[3], '+', 'LIMIT', 0, tonumber(ARGV[4]))
local out = {'ok', members[#members] or '', #members}
if #members == 0 then return out end
local keys = {}
for j = 1, #members do keys[j] = ARGV[7] .. members[j] end
local values = redis.call('MGET', unpack(keys))
-- A needle without characters JSON escapes shows verbatim in the stored JSON of an ASCII row that
-- holds it (no \u escapes either): a row without it is skipped undecoded (the common case, and
-- most of the cost).
local plain = ascii and not string.find(needle, '["\\%c]')
for k = 1, #values do
  local value = values[k]
  if value and plain and not string.find(value, '[\128-\255]') and not string.find(value, '\\u', 1, true)
      and not string.find(string.lower(value), needle, 1, true) then
    value = nil
  end
  if value then
    local content = cjson.decode(value)['message']['content']
    local keep
    if string.find(content, '[\128-\255]') then
      keep = true  -- casefold of non-ASCII text is Python's to decide
    else
      keep = ascii and string.find(string.lower(content), needle, 1, true) ~= nil
    end
    if keep then out[#out + 1] = value end
  end
end
return out
"""
)

PAGE = 250  # rows a search reads per script call: a few ms of server time

# A Redis Cluster: the ops of one namespace (all its keys share the hash tag {<ns>}) past the checkpoint
# read before (ARGV[1]); KEYS[1]: the index; ARGV[2]: the key prefix, ARGV[3]: the ops. Applying an op
# twice changes nothing (the same row key and value; a clear again finds nothing older than its mark), so
# a checkpoint that lags or moves meanwhile only makes the count larger.
APPLY_NAMESPACE = (
    _ROWS
    + r"""
local checkpoint, base = tonumber(ARGV[1]), ARGV[2]
local mark = tonumber(redis.call('GET', base .. 'cleared') or '-1')
local ops = cjson.decode(ARGV[3])
local applied = 0
for n = 1, #ops do
  local op = ops[n]
  if tonumber(op[2]) > checkpoint then
    applied = applied + 1
    local at = tonumber(op[4])
    if op[1] == 'a' and at > mark then
      add(base, KEYS[1], op)
    elseif op[1] == 'c' and at > mark then
      mark = at
      clear(base, KEYS[1], op)
    elseif op[1] == 'r' then
      retract(base, KEYS[1], op)
    end
  end
end
return applied
"""
)


# An erasure op: delete the session's rows except those after it on its partition (the `erases` rule).
# KEYS: index; ARGV: key prefix, session id, topic, partition, offset. The session's
# own rows where the namespace files them by session (see `_ROWS`), else a scan of its index; it
# runs before the batch's apply script moves the checkpoint.
ERASE = r"""
-- Whether the erasure takes row `m` of the session: all but those after it on its partition.
local function goes(m)
  local t, p, o = string.match(m, '^%d+,(.*),(%d+),(%d+)$')
  return not (t == ARGV[3] and tonumber(p) == tonumber(ARGV[4]) and tonumber(o) > tonumber(ARGV[5]))
end
local gone, row = 0, ARGV[1] .. 'm:'
if redis.call('EXISTS', ARGV[1] .. 'by-session') == 1 then
  local rows = ARGV[1] .. 's:' .. ARGV[2]
  local members = redis.call('ZRANGE', rows, 0, -1)
  for i = 1, #members do
    local m = members[i]
    if goes(m) then
      redis.call('ZREM', rows, m)
      if redis.call('DEL', row .. m) == 1 then
        redis.call('ZREM', KEYS[1], m)
        gone = gone + 1
      end
    end
  end
  return gone
end
local members = redis.call('ZRANGE', KEYS[1], 0, -1)
for i = 1, #members do
  local m = members[i]
  local value = redis.call('GET', row .. m)
  if value and cjson.decode(value)['session_id'] == ARGV[2] and goes(m) then
    redis.call('DEL', row .. m)
    redis.call('ZREM', KEYS[1], m)
    gone = gone + 1
  end
end
return gone
"""
