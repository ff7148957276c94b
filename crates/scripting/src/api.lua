-- The redis.* API, the error handler and the sandbox of hotkv's Lua VM, run once when a VM is
-- made, with the real global table. Everything here is reached by scripts only through the
-- read-only proxies it returns. The host functions (static.call, static.pcall, static.host)
-- reach a run's host only while the VM has one set for the run; outside a run they refuse.
local H, static = ...

local G = _G
local dbg = debug
local type, error, select, unpack, tostring, next, pairs = type, error, select, unpack, tostring, next, pairs
local rawget, rawset, setmetatable, getmetatable = rawget, rawset, setmetatable, getmetatable
local xpcall, pcall, loadstring, load, setfenv, getfenv = xpcall, pcall, loadstring, load, setfenv, getfenv
local tinsert, tremove, tsort = table.insert, table.remove, table.sort

local API = '=api'

local host = static.host

-- An error raised by redis.call (a Rust function, so that `return redis.call(...)` keeps the
-- caller's frame for the error's line) arrives as mlua's wrapped error, its table left in
-- H.pending.
local function unwrap(err)
  if type(err) == 'table' then return err end
  local p = rawget(H, 'pending')
  if p ~= nil then
    rawset(H, 'pending', nil)
    return p
  end
  return {err = 'ERR ' .. tostring(err)}
end

-- Valkey's __server__err__handler: errors become {err=...} tables carrying the source and
-- line of the user's code that raised them (frames of C functions and of this API skipped).
local function handler(err)
  local level = 2
  local i = dbg.getinfo(level, 'nSl')
  while i and (i.what == 'C' or i.source == API) do
    level = level + 1
    i = dbg.getinfo(level, 'nSl')
  end
  err = unwrap(err)
  if i then
    err['source'] = i.source
    err['line'] = i.currentline
  end
  return err
end

local redis = {}
-- Rust functions, registered once: during a run they reach its host.
redis.call = static.call
redis.pcall = static.pcall
local function checked_host(op)
  return function(...)
    local r, failed = host(op, ...)
    if failed then error(r) end
    return r
  end
end
redis.setresp = checked_host(2)
redis.set_repl = checked_host(3)
redis.log = checked_host(4)
redis.acl_check_cmd = checked_host(5)
redis.error_reply = static.error_reply
redis.status_reply = function(...)
  if select('#', ...) ~= 1 or type((...)) ~= 'string' then
    return static.error_reply('-ERR wrong number or type of arguments')
  end
  return {ok = (...)}
end
redis.replicate_commands = function() return true end
redis.breakpoint = static.breakpoint
redis.debug = static.debug
redis.REPL_NONE = 0
redis.REPL_AOF = 1
redis.REPL_SLAVE = 2
redis.REPL_REPLICA = 2
redis.REPL_ALL = 3
redis.LOG_DEBUG = 0
redis.LOG_VERBOSE = 1
redis.LOG_NOTICE = 2
redis.LOG_WARNING = 3
redis.REDIS_VERSION = static.version
redis.REDIS_VERSION_NUM = static.version_num
redis.VALKEY_VERSION = static.version
redis.VALKEY_VERSION_NUM = static.version_num
redis.SERVER_NAME = 'valkey'

-- Read-only tables: an empty proxy whose reads go to the real table and whose writes fail.
-- `protected` lists every proxy so the functions that write raw (rawset, table.insert...)
-- refuse them too, and so the VM can check after a run that none was tampered with. Nothing a
-- script can reach leads to a real table: not a proxy's metatable (getmetatable shows a stand-in
-- instead), not what pairs and ipairs return, not a built-in function's environment.
local protected = setmetatable({}, {__mode = 'k'})
local backing = setmetatable({}, {__mode = 'k'})
local function ro()
  error('Attempt to modify a readonly table', 2)
end
local function missing(_, name)
  error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2)
end
-- What getmetatable shows of a read-only table: an empty read-only table, whose `__index`
-- reads `index`. Valkey's read-only tables have no metatable but _G, whose `__index` is the
-- function reporting a missing global.
local function stand_in(index)
  local shown = {}
  local mt = {__newindex = ro, __metatable = false}
  if index ~= nil then mt.__index = {__index = index} end
  setmetatable(shown, mt)
  protected[shown] = true
  return shown
end
local hidden = stand_in(nil)
-- `strict`: reading a missing field is an error too (the library-loading API's tables).
local function readonly(t, strict, shown)
  local index = t
  if strict then
    index = function(_, k)
      local v = rawget(t, k)
      if v == nil then
        error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
      end
      return v
    end
  end
  local proxy = setmetatable({}, {__index = index, __newindex = ro, __metatable = shown or hidden})
  protected[proxy] = true
  backing[proxy] = t
  return proxy
end

-- Lua 5.1 has no __pairs: next, pairs and ipairs look through a proxy to its table, so
-- `for k in pairs(os)` lists os's functions as it does in Valkey. The state they hand the loop
-- is the proxy itself, never the table behind it.
local rawnext, rawpairs, rawipairs = next, pairs, ipairs
local function pnext(t, k)
  return rawnext(backing[t] or t, k)
end
local function inext(p, i)
  i = i + 1
  local v = rawget(backing[p], i)
  if v ~= nil then return i, v end
end
G.next = pnext
G.pairs = function(t)
  if backing[t] then return pnext, t, nil end
  return rawpairs(t)
end
G.ipairs = function(t)
  if backing[t] then return inext, t, 0 end
  return rawipairs(t)
end
local function refuse(t)
  if protected[t] then error('Attempt to modify a readonly table', 3) end
end

G.setmetatable = function(t, mt)
  refuse(t)
  return setmetatable(t, mt)
end
G.rawset = function(t, k, v)
  refuse(t)
  return rawset(t, k, v)
end
table.insert = function(t, ...)
  refuse(t)
  return tinsert(t, ...)
end
table.remove = function(t, ...)
  refuse(t)
  return tremove(t, ...)
end
table.sort = function(t, ...)
  refuse(t)
  return tsort(t, ...)
end

-- Valkey's pcall: an {err=...} table caught from redis.call comes back as its text.
-- mlua's own pcall pushes its status onto a full stack when the callee returns many values,
-- so the callee's results come back packed in one table and are unpacked here, where unpack
-- checks the stack.
local function pack(...)
  return {n = select('#', ...), ...}
end
G.pcall = function(f, ...)
  local args = pack(...)
  local ok, r = pcall(function() return pack(f(unpack(args, 1, args.n))) end)
  if ok then
    return true, unpack(r, 1, r.n)
  end
  -- A killed script stops, whatever it catches (Valkey switches to a line hook for this).
  if static.killed() then error(r, 0) end
  if rawget(H, 'pending') ~= nil then
    r = unwrap(r)
  end
  if type(r) == 'table' and type(r.err) == 'string' then
    return false, r.err
  end
  return false, r
end

G.xpcall = function(f, h)
  local ok, r = xpcall(function() return pack(f()) end, h)
  if ok then
    return true, unpack(r, 1, r.n)
  end
  if static.killed() then error(r, 0) end
  return false, r
end

-- No bytecode: a binary chunk could break the VM. Code loaded at run time gets the read-only
-- globals, as the script itself has.
local env
G.loadstring = function(s, name)
  if type(s) == 'string' and s:byte(1) == 27 then
    return nil, 'attempt to load a binary chunk'
  end
  local f, e = loadstring(s, name)
  if f then setfenv(f, env) end
  return f, e
end
G.load = function(fn, name)
  local f, e = load(function()
    local piece = fn()
    if type(piece) == 'string' and piece:byte(1) == 27 then
      error('attempt to load a binary chunk')
    end
    return piece
  end, name)
  if f then setfenv(f, env) end
  return f, e
end
-- The built-in functions (the base library's, this API's, the libraries') have the real
-- globals as their environment: a script sees the read-only proxy in its place, and cannot
-- give a built-in another one. A level counts from the script's caller, past this wrapper.
local function level(f)
  if type(f) == 'number' and f > 0 then return f + 1 end
  return f
end
G.getfenv = function(f)
  local e = getfenv(level(f or 1))
  if e == G then return env end
  return e
end
G.setfenv = function(f, t)
  if f == 0 then error('Attempt to modify a readonly table', 2) end
  f = level(f)
  if getfenv(f) == G then error('Attempt to modify a readonly table', 2) end
  local r = setfenv(f, t)
  return r
end

-- Rust helpers answer (ok, value); a failure is raised here, at the caller's line.
local function checked(f)
  return function(...)
    local ok, r = f(...)
    if not ok then error(r, 2) end
    return r
  end
end
math.random = checked(static.random)
math.randomseed = checked(static.randomseed)
redis.sha1hex = checked(static.sha1hex)

-- Only os.clock stays, as in Valkey.
G.os = {clock = os.clock}

G.redis = redis
G.server = redis
G.debug = nil
G.print = nil
G.dofile = nil
G.loadfile = nil
G.module = nil
G.require = nil
G.package = nil
G.io = nil

for _, name in pairs({'redis', 'string', 'math', 'table', 'os', 'coroutine', 'cjson', 'cmsgpack', 'bit', 'struct'}) do
  local lib = rawget(G, name)
  if type(lib) == 'table' then
    rawset(G, name, readonly(lib))
  end
end
rawset(G, 'server', rawget(G, 'redis'))

-- Strings' methods come from the read-only string table, and their metatable cannot be had.
local smeta = getmetatable('')
smeta.__index = rawget(G, 'string')
smeta.__metatable = hidden

-- Reading an undeclared global is an error; the globals seen by scripts are read-only.
setmetatable(G, {__index = missing})
env = readonly(G, false, stand_in(missing))
rawset(G, '_G', env)

-- FUNCTION libraries. Their code runs with `fenv` as its globals: while a library loads,
-- those are only `redis`/`server` with register_function, log and the version (Valkey's
-- library API); once loaded, its functions see the same globals as EVAL scripts.
local registered = nil
local function register_error(text)
  error({err = 'ERR ' .. text})
end
local function register_function(...)
  if registered == nil then
    register_error('server.register_function can only be called on FUNCTION LOAD command')
  end
  local n = select('#', ...)
  if n < 1 or n > 2 then
    register_error('wrong number of arguments to server.register_function')
  end
  local def = {flags = {}}
  if n == 2 then
    local name, cb = ...
    if type(name) ~= 'string' and type(name) ~= 'number' then
      register_error('first argument to server.register_function must be a string')
    end
    if type(cb) ~= 'function' then
      register_error('second argument to server.register_function must be a function')
    end
    def.name, def.callback = tostring(name), cb
  else
    local t = ...
    if type(t) ~= 'table' then
      register_error('calling server.register_function with a single argument is only applicable to Lua table (representing named arguments).')
    end
    for k, v in pairs(t) do
      if type(k) ~= 'string' and type(k) ~= 'number' then
        register_error('named argument key given to server.register_function is not a string')
      end
      local key = string.lower(tostring(k))
      if key == 'function_name' then
        if type(v) ~= 'string' and type(v) ~= 'number' then
          register_error('function_name argument given to server.register_function must be a string')
        end
        def.name = tostring(v)
      elseif key == 'description' then
        if type(v) ~= 'string' and type(v) ~= 'number' then
          register_error('description argument given to server.register_function must be a string')
        end
        def.description = tostring(v)
      elseif key == 'callback' then
        if type(v) ~= 'function' then
          register_error('callback argument given to server.register_function must be a function')
        end
        def.callback = v
      elseif key == 'flags' then
        if type(v) ~= 'table' then
          register_error('flags argument to server.register_function must be a table representing function flags')
        end
        local j = 1
        while v[j] ~= nil do
          if type(v[j]) ~= 'string' or not static.is_flag(v[j]) then
            register_error('unknown flag given')
          end
          def.flags[#def.flags + 1] = string.lower(v[j])
          j = j + 1
        end
      else
        register_error('unknown argument given to server.register_function')
      end
    end
    if def.name == nil then
      register_error('server.register_function must get a function name argument')
    end
    if def.callback == nil then
      register_error('server.register_function must get a callback argument')
    end
  end
  local ok, why = static.check_function(def.name)
  if not ok then register_error(why) end
  for _, d in ipairs(registered) do
    if d.name == def.name then register_error('Function already exists in the library') end
  end
  registered[#registered + 1] = def
end

local lib_api = {
  register_function = register_function,
  log = static.log,
  LOG_DEBUG = 0, LOG_VERBOSE = 1, LOG_NOTICE = 2, LOG_WARNING = 3,
  REDIS_VERSION = static.version, REDIS_VERSION_NUM = static.version_num,
  VALKEY_VERSION = static.version, VALKEY_VERSION_NUM = static.version_num,
  SERVER_NAME = 'valkey',
}
local lib_api_ro = readonly(lib_api, true)
local lib_globals = readonly({redis = lib_api_ro, server = lib_api_ro}, true)
local fmeta = {__index = G, __newindex = ro, __metatable = hidden}
local fenv = setmetatable({}, fmeta)
protected[fenv] = true

-- Runs a library's compiled code to collect its functions; `deadline_check` raises when the
-- load runs too long. Returns true and the definitions, or false and the error table.
local function load_library(chunk)
  setfenv(chunk, fenv)
  registered = {}
  fmeta.__index = lib_globals
  local ok, err = xpcall(function() chunk() end, handler)
  fmeta.__index = G
  local list = registered
  registered = nil
  if not ok then return false, err end
  return true, list
end

-- A script's runner, made once when it is compiled: its reply is its first return value,
-- the others dropped inside the protected call (see pack above for why mlua's xpcall must
-- not get many).
local function make_runner(f)
  local wrapped = function() return (f()) end
  return function() return xpcall(wrapped, handler) end
end
-- A library function's runner: KEYS and ARGV are its two arguments.
local function make_fn_runner(f)
  local k, a
  local wrapped = function() return (f(k, a)) end
  return function(keys, args)
    k, a = keys, args
    local ok, r = xpcall(wrapped, handler)
    k, a = nil, nil
    return ok, r
  end
end
-- Whether every proxy is still empty: a script that managed to write into one anyway (through
-- some raw write not covered above) makes the VM rebuild itself before the next run.
local function intact()
  for p in pairs(protected) do
    if next(p) ~= nil then return false end
  end
  return true
end

return env, make_runner, make_fn_runner, intact, load_library, dbg
