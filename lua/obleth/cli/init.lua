--- Command dispatch for the obleth binary: `obleth <command> ...` runs
--- `require("obleth.cli." .. command).main(args)` as the main task.
local M = {}

local commands = {
  serve = "obleth.cli.serve",
  provisioner = "obleth.cli.provisioner",
  slurm = "obleth.cli.slurm",
  store = "obleth.cli.store",
  repl = "obleth.repl",
  ["smoke-engine"] = "obleth.testing.cli",
}

---@param cmd string the command name (argv[1], or "provisioner" for obleth-provisioner)
---@param args string[] the remaining arguments
---@return integer exit status
function M.main(cmd, args)
  local modname = commands[cmd]
  if not modname then
    io.stderr:write(("obleth: unknown command '%s' (see 'obleth help')\n"):format(cmd))
    return 2
  end
  local ok, mod = pcall(require, modname)
  if not ok then
    if tostring(mod):find("module '" .. modname .. "' not found", 1, true) then
      io.stderr:write(("obleth: '%s' is not available in this build yet\n"):format(cmd))
      return 2
    end
    error(mod, 0)
  end
  return mod.main(args) or 0
end

return M
