-- busted output handler: one line per test, then "N passed, N failed, N skipped".
-- When OBLETH_SPEC_COUNTS names a file, "passed failed skipped" is appended to
-- it so spec/run.sh can add the tiers up.
return function(options)
  local busted = require("busted")
  local handler = require("busted.outputHandlers.base")()
  local pretty = require("pl.pretty")

  local function fullname(element)
    return handler.getFullName(element)
  end

  local function message_of(t)
    local m = t.message
    if m == nil then return "nil error" end
    if type(m) ~= "string" then m = pretty.write(m) end
    return m
  end

  handler.testEnd = function(element, _, status)
    local name = fullname(element)
    if status == "success" then
      io.write("  ok    ", name, "\n")
    elseif status == "pending" then
      local t = handler.pendings[#handler.pendings]
      io.write("  skip  ", name, " -- ", tostring(t and t.message or "pending"), "\n")
    else
      local list = status == "failure" and handler.failures or handler.errors
      local t = list[#list]
      io.write("  FAIL  ", name, "\n")
      if t then
        local where = t.trace and t.trace.short_src and (t.trace.short_src .. ":" .. tostring(t.trace.currentline)) or ""
        io.write("        ", where, "\n        ", (message_of(t):gsub("\n", "\n        ")), "\n")
        if options.verbose and t.trace and t.trace.traceback then io.write(t.trace.traceback, "\n") end
      end
    end
    io.flush()
    return nil, true
  end

  handler.error = function(element, _, message)
    -- errors outside a test (a spec file that fails to load, a failing setup)
    if element and element.descriptor ~= "it" then
      io.write("  FAIL  ", tostring(element.name or element.descriptor or "?"), "\n        ",
        tostring(message):gsub("\n", "\n        "), "\n")
      io.flush()
    end
    return nil, true
  end

  handler.suiteEnd = function()
    local passed = handler.successesCount
    local failed = handler.failuresCount + handler.errorsCount
    local skipped = handler.pendingsCount
    io.write(("%d passed, %d failed, %d skipped\n"):format(passed, failed, skipped))
    io.flush()
    local f = os.getenv("OBLETH_SPEC_COUNTS")
    if f and f ~= "" then
      local fh = io.open(f, "a")
      if fh then fh:write(("%d %d %d\n"):format(passed, failed, skipped)); fh:close() end
    end
    return nil, true
  end

  busted.subscribe({ "test", "end" }, handler.testEnd, { predicate = handler.cancelOnPending })
  busted.subscribe({ "error" }, handler.error)
  busted.subscribe({ "failure" }, handler.error)
  busted.subscribe({ "suite", "end" }, handler.suiteEnd)
  return handler
end
