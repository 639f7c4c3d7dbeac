--- Thresholds the server decides with and the dashboard words by: each number is here once; the
-- server uses it and hands it to the page (GET /api/v1/settings/slurm `thresholds`), which never keeps
-- a copy.
local M = {}

--- Seconds without a provisioner check-in after which it is taken for stopped: the router's 503 says
--- so (obleth.router.unavailable) and the Slurm card warns.
M.provisioner_stale = 60

--- Seconds before a static Slurm JWT's expiry from which it is warned about (obleth.slurm.token_source,
--- the settings' token_warning, the Slurm card and the connection test).
M.token_warn_before = 86400

return M
