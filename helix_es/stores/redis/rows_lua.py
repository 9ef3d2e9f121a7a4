"""The Lua scripts of the Redis row store (`helix_es.stores.redis.rows`, which owns the keys and
documents them): apply one server's batch whole, one namespace's share on a cluster, move a
cluster's checkpoint, read a page of a scan.

Scripts never compare binary strings with `<` (Lua's string order follows the server's locale):
order encodings are compared byte by byte, and ranges are left to ZRANGEBYLEX (memcmp).
"""

_CHANGES = r"""
-- A signed 64-bit decimal as its order encoding: 8 bytes, big-endian, of value + 2^63 (exact:
-- base 2^32 halves stay far below 2^53).
local function enc(dec)
  local neg = string.byte(dec, 1) == 45
  local hi, lo = 0, 0
  for i = neg and 2 or 1, #dec do
    lo = lo * 10 + string.byte(dec, i) - 48
    hi = hi * 10 + math.floor(lo / 4294967296)
    lo = lo % 4294967296
  end
  if neg then
    if lo > 0 then hi, lo = 2147483647 - hi, 4294967296 - lo else hi = 2147483648 - hi end
  else
    hi = hi + 2147483648
  end
  local b = {}
  for i = 4, 1, -1 do
    b[i], b[i + 4] = hi % 256, lo % 256
    hi, lo = math.floor(hi / 256), math.floor(lo / 256)
  end
  return string.char(unpack(b))
end

-- -1, 0, 1 as the first 8 bytes of a sort below, equal to, above those of b.
local function cmp8(a, b)
  for i = 1, 8 do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y and -1 or 1 end
  end
  return 0
end

-- The first 8 bytes of s as two 32-bit numbers (exact in a double): compared as pairs, they order as
-- the bytes do, in one call for the 8 bytes.
local function hilo(s)
  local a, b, c, d, e, f, g, h = string.byte(s, 1, 8)
  return ((a * 256 + b) * 256 + c) * 256 + d, ((e * 256 + f) * 256 + g) * 256 + h
end

-- The ZRANGEBYLEX bound just above every member whose first 8 bytes are at most m's.
local function above(m)
  local b = {string.byte(m, 1, 8)}
  for i = 8, 1, -1 do
    if b[i] < 255 then
      b[i] = b[i] + 1
      for j = i + 1, 8 do b[j] = 0 end
      return '(' .. string.char(unpack(b))
    end
  end
  return '+'
end

-- The index of the last byte of the JSON value starting at i.
local function skip(s, i)
  local c = string.byte(s, i)
  if c == 34 then  -- a string: up to the first quote no backslash escapes
    local j = i + 1
    while true do
      local k = string.find(s, '["\\]', j)
      if string.byte(s, k) == 34 then return k end
      j = k + 2
    end
  elseif c == 123 or c == 91 then
    local depth, j = 0, i
    while true do
      local k = string.find(s, '[%[%]{}"]', j)
      local d = string.byte(s, k)
      if d == 34 then
        k = skip(s, k)
      elseif d == 123 or d == 91 then
        depth = depth + 1
      else
        depth = depth - 1
        if depth == 0 then return k end
      end
      j = k + 1
    end
  end
  return string.find(s, '[,}%]]', i) - 1
end

-- A stored row's lookup values as its lookup keys name them: its first n members (the store writes
-- lookup columns first), as JSON, a string without its quotes. Column names need no escapes.
local function lookups(value, n)
  local out, p = {}, 2
  for i = 1, n do
    local q = string.find(value, '":', p, true) + 2
    local e = skip(value, q)
    local v = string.sub(value, q, e)
    if string.byte(v, 1) == 34 then v = string.sub(v, 2, -2) end
    out[i] = v
    p = e + 2
  end
  return out
end

-- A namespace's marks, read once per script: key prefix .. '|' .. name -> encoding (false: none).
local marks = {}
local function mark_of(base, name)
  local k = base .. '|' .. name
  local m = marks[k]
  if m == nil then
    local d = redis.call('HGET', base .. 'marks', name)
    m = d and enc(d) or false
    marks[k] = m
  end
  return m, k
end

-- Plain puts (no replace) wait in a run, per table, and go in a few calls: HMGET says which rows are
-- new, then a HSET and a ZADD of the index a chunk, and one ZADD per lookup set for the whole run (a
-- rebuild's batch holds tens of rows of each session). A change of another kind writes the run
-- first, so every change still sees those before it. A run is four arrays: members, values, and
-- where each row's lookup values are (an array of the spec, the index before the row's first).
local CHUNK = 1000  -- rows a call: Lua's unpack takes at most 8,000 values

local function write_run(k, run, listed)
  local rows, index, lhead, lset, cols = k[1], k[2], k[3], k[4], k[5]
  local ms, vs, ls, os = run[1], run[2], run[3], run[4]
  local sets, names = {}, {}  -- lookup set -> {0, member, 0, member...}, in the order first met
  for j = 1, #ms, CHUNK do
    local last = math.min(j + CHUNK - 1, #ms)
    local have = redis.call('HMGET', rows, unpack(ms, j, last))
    local fields, scored = {}, {}
    for x = j, last do
      if not have[x - j + 1] then
        local member = ms[x]
        fields[#fields + 1] = member
        fields[#fields + 1] = vs[x]
        scored[#scored + 1] = 0
        scored[#scored + 1] = member
        local looks, o = ls[x], os[x]
        for i = 1, #cols do
          local set = cols[i] .. ':' .. looks[o + i]
          local s = sets[set]
          if not s then
            s = {}
            sets[set] = s
            names[#names + 1] = set
          end
          s[#s + 1] = 0
          s[#s + 1] = member
        end
      end
    end
    if #fields > 0 then
      redis.call('HSET', rows, unpack(fields))
      redis.call('ZADD', index, unpack(scored))
    end
  end
  for n = 1, #names do
    local set = names[n]
    local s = sets[set]
    for j = 1, #s, 2 * CHUNK do redis.call('ZADD', lhead .. set, unpack(s, j, math.min(j + 2 * CHUNK - 1, #s))) end
    if not listed[lset .. '\0' .. set] then
      redis.call('SADD', lset, set)
      listed[lset .. '\0' .. set] = true
    end
  end
end

-- A put that replaces: the row is written whatever was there, and moved between lookup sets.
local function replace(k, member, value, looks, o)
  local rows, index, lhead, lset, cols = k[1], k[2], k[3], k[4], k[5]
  local old = redis.call('HGET', rows, member)
  redis.call('HSET', rows, member, value)
  if not old then
    redis.call('ZADD', index, 0, member)
    for i = 1, #cols do
      local set = cols[i] .. ':' .. looks[o + i]
      redis.call('ZADD', lhead .. set, 0, member)
      redis.call('SADD', lset, set)
    end
  elseif old ~= value and #cols > 0 then
    local was = lookups(old, #cols)
    for i = 1, #cols do
      if was[i] ~= looks[o + i] then
        redis.call('ZREM', lhead .. cols[i] .. ':' .. was[i], member)
        redis.call('ZADD', lhead .. cols[i] .. ':' .. looks[o + i], 0, member)
        redis.call('SADD', lset, cols[i] .. ':' .. looks[o + i])
      end
    end
  end
end

-- Apply one namespace's changes (its key prefix `base`), their binary parts (order encodings, row
-- values, lengths in the changes) one after the other in `data` from `at` on; returns where the next
-- namespace's parts start. Every change is idempotent: a batch applied again (a cluster's checkpoint
-- moves after its rows) changes nothing.
local function apply_changes(tables, base, changes, data, at)
  -- Per table its keys' names, per mark its value as `hilo` pairs: made once per namespace, not per
  -- change (a rebuild's batch holds thousands of one table's puts).
  local named, floors = {}, {}
  local runs, queued, listed = {}, {}, {}  -- per table its run; the runs' members; lookup sets listed
  local function flush()
    for ti, run in pairs(runs) do write_run(named[ti], run, listed) end
    runs, queued = {}, {}
  end
  for n = 1, #changes do
    local c = changes[n]
    local k = named[c[2]]
    if not k then
      local t = tables[c[2]]
      local head = base .. t[1] .. ':'
      k = {head .. 'r', head .. 'o', head .. 'l:', head .. 'lookups', t[2]}
      named[c[2]] = k
    end
    local rows, index, lhead, lset, cols = k[1], k[2], k[3], k[4], k[5]
    if c[1] == 0 then  -- puts: {0, table, replace, floor mark, {member length, value length...}, {lookup values...}}
      local f = false
      if c[4] ~= '' then
        f = floors[c[4]]
        if f == nil then
          local m = mark_of(base, c[4])
          f = false
          if m then
            local hi, lo = hilo(m)
            f = {hi, lo}
          end
          floors[c[4]] = f
        end
      end
      local lens, looks, ncols = c[5], c[6], #cols
      local run, tag = nil, c[2] .. '\0'
      if c[3] == 0 then
        run = runs[c[2]]
        if not run then
          run = {{}, {}, {}, {}}
          runs[c[2]] = run
        end
      else
        flush()
      end
      local ms, vs, ls, os = run and run[1], run and run[2], run and run[3], run and run[4]
      for r = 1, #lens, 2 do
        local ml, vl = lens[r], lens[r + 1]
        local member = string.sub(data, at, at + ml - 1)
        local value = string.sub(data, at + ml, at + ml + vl - 1)
        at = at + ml + vl
        local above_floor = true
        if f then
          local hi, lo = hilo(member)
          above_floor = hi > f[1] or (hi == f[1] and lo > f[2])
        end
        if above_floor then
          local o = (r - 1) / 2 * ncols
          if not run then
            replace(k, member, value, looks, o)
          elseif not queued[tag .. member] then  -- a row put twice keeps the first, as HSETNX would
            queued[tag .. member] = true
            local x = #ms + 1
            ms[x], vs[x], ls[x], os[x] = member, value, looks, o
          end
        end
      end
    elseif c[1] == 1 then  -- delete: {1, table, member length}
      flush()
      local member = string.sub(data, at, at + c[3] - 1)
      at = at + c[3]
      if #cols == 0 then
        if redis.call('HDEL', rows, member) == 1 then redis.call('ZREM', index, member) end
      else
        local old = redis.call('HGET', rows, member)
        if old then
          redis.call('HDEL', rows, member)
          redis.call('ZREM', index, member)
          local was = lookups(old, #cols)
          for i = 1, #cols do redis.call('ZREM', lhead .. cols[i] .. ':' .. was[i], member) end
        end
      end
    else  -- cut: {2, table, mark, upto (decimal)}
      flush()
      listed = {}  -- a cut may take lookup sets out of the list
      local m, mk = mark_of(base, c[3])
      local upto = enc(c[4])
      if not m or cmp8(m, upto) < 0 then
        redis.call('HSET', base .. 'marks', c[3], c[4])
        m = upto
        marks[mk] = m
        floors[c[3]] = nil  -- puts after this cut compare with the new mark
      end
      local bound = above(m)
      -- The rows in the range, a page at a time; then the range of the index and of every lookup set
      -- (their members are the same order encodings, so a cut is a lex range of each), none decoded.
      -- A lookup set holds only members of the index: a range the index lacks, no lookup set has,
      -- so a cut that finds no row (a clear of a partition applied after another's) reads no set.
      local from, found = '-', false
      while true do
        local gone = redis.call('ZRANGEBYLEX', index, from, bound, 'LIMIT', 0, 500)
        if #gone == 0 then break end
        found = true
        redis.call('HDEL', rows, unpack(gone))
        from = '(' .. gone[#gone]
      end
      if found then redis.call('ZREMRANGEBYLEX', index, '-', bound) end
      if found and #cols > 0 then
        local sets = redis.call('SMEMBERS', lset)
        local whole = redis.call('EXISTS', index) == 0
        for i = 1, #sets do
          local key = lhead .. sets[i]
          if whole then
            redis.call('DEL', key)
          else
            redis.call('ZREMRANGEBYLEX', key, '-', bound)
            if redis.call('EXISTS', key) == 0 then redis.call('SREM', lset, sets[i]) end  -- emptied
          end
        end
        if whole then redis.call('DEL', lset) end
      end
    end
  end
  flush()
  return at
end

-- The spec: {tables ({name, lookup columns}), {{namespace key prefix, changes}...}} (see rows.py);
-- `data` the changes' binary parts, in the order of the changes.
local function apply_spec(spec, data)
  local at = 1
  for g = 1, #spec[2] do at = apply_changes(spec[1], spec[2][g][1], spec[2][g][2], data, at) end
end
"""

# One server: KEYS[1] the checkpoint hash; ARGV: field, after ('' none), new checkpoint, seen ('1':
# this writer had seen the field), the spec, the changes' binary parts (one string). Returns {'OK'},
# {'STALE', stored} (nothing written) or {'LOST'} (a checkpoint seen is gone: nothing written).
APPLY = (
    _CHANGES
    + r"""
local stored = redis.call('HGET', KEYS[1], ARGV[1])
if not stored and ARGV[4] == '1' then return {'LOST'} end
if (stored or '') ~= ARGV[2] then return {'STALE', stored or ''} end
apply_spec(cjson.decode(ARGV[5]), ARGV[6])
if not stored or tonumber(ARGV[3]) > tonumber(stored) then redis.call('HSET', KEYS[1], ARGV[1], ARGV[3]) end
return {'OK'}
"""
)

# A cluster: one namespace's changes (KEYS[1], its marks hash, routes the call to its slot); ARGV: the
# spec, the binary parts.
APPLY_NAMESPACE = (
    _CHANGES
    + r"""
apply_spec(cjson.decode(ARGV[1]), ARGV[2])
return 1
"""
)

# A cluster's checkpoint once the rows are on a replica: KEYS[1] the checkpoint hash; ARGV: field,
# after, new checkpoint, seen. Returns 0, -1 (a seen checkpoint is gone) or -2 (it moved: stale).
MOVE = r"""
local stored = redis.call('HGET', KEYS[1], ARGV[1])
if not stored and ARGV[4] == '1' then return -1 end
if (stored or '') ~= ARGV[2] then return -2 end
if not stored or tonumber(ARGV[3]) > tonumber(stored) then redis.call('HSET', KEYS[1], ARGV[1], ARGV[3]) end
return 0
"""

# One page of a scan. KEYS: the rows hash, the n indexes (the order zset, or one lookup zset per
# `where` column), then on one server with a `want` the checkpoint hash. ARGV: n, field ('' none),
# want offset, reverse ('1'), cursor, page, needle ('' none), ascii ('1'). Returns {'wait'} while
# behind, else {'ok', last member read, members read[, values]}: the stored values of the page's rows
# in every index (read from the smallest) that may hold the needle, joined by a 0 byte (no value holds
# one): one reply element, not one per row, for the client to parse.
SCAN = r"""
local n = tonumber(ARGV[1])
if ARGV[2] ~= '' then
  local applied = redis.call('HGET', KEYS[n + 2], ARGV[2])
  if not applied or tonumber(applied) < tonumber(ARGV[3]) then return {'wait'} end
end
local pick, least = 2, nil
if n > 1 then
  for i = 2, n + 1 do
    local size = redis.call('ZCARD', KEYS[i])
    if not least or size < least then pick, least = i, size end
  end
end
local members
if ARGV[4] == '1' then
  members = redis.call('ZREVRANGEBYLEX', KEYS[pick], ARGV[5], '-', 'LIMIT', 0, tonumber(ARGV[6]))
else
  members = redis.call('ZRANGEBYLEX', KEYS[pick], ARGV[5], '+', 'LIMIT', 0, tonumber(ARGV[6]))
end
local out = {'ok', members[#members] or '', #members}
local keep = {}
for j = 1, #members do
  local ok = true
  for i = 2, n + 1 do
    if i ~= pick and not redis.call('ZSCORE', KEYS[i], members[j]) then ok = false; break end
  end
  if ok then keep[#keep + 1] = members[j] end
end
if #keep == 0 then return out end
local values, kept = redis.call('HMGET', KEYS[1], unpack(keep)), {}
-- Of an ASCII row (its JSON has no \u escapes either), what Python's casefold finds is decided here: an
-- ASCII needle JSON does not escape shows verbatim in the lower-cased JSON of a row that holds it, and a
-- needle that is not ASCII (casefolded already) is in no such row. Other rows go to Python. Only the
-- row's JSON is looked at (the text column is there), not the json columns' documents after it.
local needle, ascii = ARGV[7], ARGV[8] == '1'
local plain = needle ~= '' and ascii and not string.find(needle, '["\\%c]')
local wide = needle ~= '' and not ascii
for k = 1, #values do
  local value = values[k]
  if value and (plain or wide) then
    local gap = string.find(value, '\1', 1, true)
    local head = gap and string.sub(value, 1, gap - 1) or value
    if not string.find(head, '[\128-\255]') and not string.find(head, '\\u', 1, true)
        and (wide or not string.find(string.lower(head), needle, 1, true)) then
      value = nil
    end
  end
  if value then kept[#kept + 1] = value end
end
if #kept > 0 then out[4] = table.concat(kept, '\0') end
return out
"""
