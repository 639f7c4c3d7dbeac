--- `obleth store copy --from LOCATION --to LOCATION`: copy a whole store into a new, empty one, to
-- move from SQLite to PostgreSQL (docs/operations.md "Moving from SQLite"). LOCATION is sqlite:PATH
-- (or a path) or a postgresql:// URL. Stop every obleth serve on the source first: rows written
-- during the copy would not be copied. Exit status: 0 copied, 1 refused or failed (nothing was
-- written to the destination), 2 bad usage.
local args = require "obleth.util.args"

local M = {}

M.usage = [[
usage: obleth store copy --from LOCATION --to LOCATION

Copies every row of the store at --from into the empty store at --to (created and
migrated when needed), in one transaction: ids, the installation id (in every
job's tag) and the provisioner lease's generation are kept. LOCATION is
sqlite:PATH (or a file path) or postgresql://USER:PASSWORD@HOST:PORT/DB. Stop
obleth serve on the source first. The password may also come from PGPASSWORD.
]]

local spec = {
  from = { kind = "string", arg = "LOCATION", help = "the store to copy (sqlite:PATH or postgresql://...)" },
  to = { kind = "string", arg = "LOCATION", help = "the empty store to fill" },
}

local function _die(msg, code)
  io.stderr:write("obleth store: ", msg, "\n")
  return code or 1
end

local function _location(s) return (s:gsub("^sqlite:", "")) end

function M.main(argv)
  argv = argv or {}
  local sub = argv[1]
  if sub == nil or sub == "help" or sub == "--help" or sub == "-h" then
    io.stdout:write(M.usage, "\noptions:\n", args.help(spec), "\n")
    return sub == nil and 2 or 0
  end
  if sub ~= "copy" then return _die(("unknown subcommand %q\n\n%s"):format(sub, M.usage), 2) end
  local o, perr = args.parse({ table.unpack(argv, 2) }, spec)
  if not o then return _die(perr .. "\n\n" .. M.usage, 2) end
  if o[1] then return _die(("unexpected argument %q\n\n%s"):format(o[1], M.usage), 2) end
  if not o.from or not o.to then return _die("--from and --to are both required\n\n" .. M.usage, 2) end
  local store = require "obleth.store"
  local from, to = _location(o.from), _location(o.to)
  if from == to then return _die("--from and --to are the same store", 2) end
  if not from:match("^postgres%a*://") and not require("obleth.sys").stat(from) then
    return _die(("the source %s does not exist"):format(from))
  end
  local src, serr = store.open(from)
  if not src then return _die(serr.message) end
  local dst, derr = store.open(to)
  if not dst then src:close(); return _die(derr.message) end
  local counts, err = require("obleth.store.copy").copy(src, dst)
  local src_loc, dst_loc = src.location, dst.location
  src:close()
  dst:close()
  if not counts then return _die(err.message) end
  local parts = {}
  for _, t in ipairs(require("obleth.store.copy").TABLES) do
    if (counts[t] or 0) > 0 then parts[#parts + 1] = ("%s %d"):format(t, counts[t]) end
  end
  io.stdout:write(("copied %s to %s: %s\n"):format(src_loc, dst_loc,
    #parts > 0 and table.concat(parts, ", ") or "no rows"))
  return 0
end

return M
