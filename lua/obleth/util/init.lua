--- obleth.util — small pure helpers any layer may use (they require nothing from obleth but each
-- other). Each is its own module; this index only names them:
--   obleth.util.json     JSON text for the API and the store (lua-cjson with arrays kept arrays)
--   obleth.util.tables   shallow copy and merge
--   obleth.util.timefmt  Slurm time limits: the forms sbatch --time takes, and printing them
--   obleth.util.format   plain-text tables and JSON-safe values for the command-line tools
--   obleth.util.args     command-line parsing shared by the obleth commands
--   obleth.util.shell    POSIX shell quoting
--   obleth.util.hostlist Slurm hostlist expressions
--   obleth.util.text     cutting text on a UTF-8 character boundary
local M = {}

--- The helper modules, by short name.
M.MODULES = { json = "obleth.util.json", tables = "obleth.util.tables", timefmt = "obleth.util.timefmt",
  format = "obleth.util.format", args = "obleth.util.args", shell = "obleth.util.shell",
  hostlist = "obleth.util.hostlist", text = "obleth.util.text" }

return M
