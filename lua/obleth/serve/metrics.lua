--- obleth.serve.metrics — the series of `obleth serve` itself on /metrics (docs/operations.md):
-- the provisioner's check-in, passes, lease and policy; the Slurm JWT's expiry; the HTTP server's
-- connections. They go in the context's registry (obleth.util.prometheus), beside the router's
-- own series; the router serves the text.
local M = {}

--- Register the process's gauges in `ctx.metrics`.
---@param ctx table the serve context (obleth.serve.context): store, now, slurm_settings
---@param http table|nil the host's obleth.http (server_stats); default require("obleth.http")
function M.register(ctx, http)
  local reg, store, now = ctx.metrics, ctx.store, ctx.now
  local nan = 0 / 0
  local function num(v) return type(v) == "number" and v or nan end
  reg:gauge("obleth_provisioner_last_checkin_age_seconds",
    "Seconds since the provisioner last reported a pass (NaN: never)", nil, function(set)
      local at = store:provisioner_status().checked_in_at
      set({}, type(at) == "number" and math.max(0, now() - at) or nan)
    end)
  local pstat -- one store read per scrape, shared by the provisioner's gauges
  local function status() return pstat or store:provisioner_status() end
  reg:gauge("obleth_provisioner_failed_passes", "Provisioner passes failed in a row", nil, function(set)
    pstat = store:provisioner_status()
    set({}, pstat.failed_passes or 0)
  end)
  reg:gauge("obleth_provisioner_last_pass_duration_seconds", "How long the provisioner's last pass took",
    nil, function(set) set({}, num(status().last_pass_duration)) end)
  reg:gauge("obleth_provisioner_lease_expires_in_seconds",
    "Seconds until the provisioner lease expires unless renewed (negative: expired; NaN: never held)", nil,
    function(set)
      local l = status().lease
      set({}, type(l) == "table" and l.expires_at - now() or nan)
    end)
  reg:gauge("obleth_provisioner_lease_generation", "The provisioner lease's generation (grows at each hand-over)",
    nil, function(set)
      local l = status().lease
      set({}, type(l) == "table" and l.generation or 0)
    end)
  reg:gauge("obleth_provisioner_policy_error", "1 while an edited policy file does not load (the previous one is used)",
    nil, function(set) set({}, type(status().policy_error) == "table" and 1 or 0) end)
  -- this process's own policies (learned, suggestions, partition_fit, validate, access, scale run here):
  -- an override in policy.d that does not load keeps the previous version, and shows here
  reg:gauge("obleth_serve_policy_error",
    "1 while an edited policy file of this obleth serve does not load (the previous one is used), by policy",
    { "policy" }, function(set)
      local policy = require "obleth.policy"
      local ok = pcall(policy.reload)
      local errs = ok and policy.errors() or {}
      for _, name in ipairs(policy.NAMES) do set({ name }, errs[name] and 1 or 0) end
    end)
  local tok -- one computation per scrape
  reg:gauge("obleth_slurm_token_expires_in_seconds",
    "Seconds until the Slurm JWT expires (NaN: unknown), by token_source", { "source" }, function(set)
      local ok, t = pcall(function()
        return require("obleth.slurm.token_source").status(ctx:slurm_settings(), status(), now())
      end)
      tok = ok and t or nil
      if tok and tok.source then set({ tok.source }, tok.expires_at and tok.expires_at - now() or nan) end
    end)
  reg:gauge("obleth_slurm_token_warning",
    "1 when the Slurm JWT needs an operator: a static token that expires within a day (or has), "
      .. "or a renewal that fails", { "source" }, function(set)
      if tok and tok.source then set({ tok.source }, tok.warning and 1 or 0) end
    end)
  -- several obleth serve on one PostgreSQL: how many instances' load this one adds up
  local share = ctx.load
  if share and share.instances then
    reg:gauge("obleth_load_share_instances", "obleth serve instances whose router load this one adds up for the "
      .. "scale policy, itself included (those that published within the expiry)", nil,
      function(set) set({}, share:instances()) end)
  end
  -- the HTTP server's own connections (host/http_frame.c: cap, header and idle deadlines)
  http = http or require("obleth.http")
  if http.server_stats then
    local sstats
    reg:gauge("obleth_http_connections", "Client connections open to this process's HTTP servers", nil,
      function(set)
        sstats = http.server_stats()
        set({}, sstats.open)
      end)
    reg:counter("obleth_http_connections_closed_total", "Client connections obleth closed or refused, by "
      .. "reason: refused (503 at the cap), evicted (room made at the cap or when descriptors ran out), "
      .. "header_timeout, idle", { "reason" }, function(set)
        local st = sstats or http.server_stats()
        set({ "refused" }, st.refused)
        set({ "evicted" }, st.evicted)
        set({ "header_timeout" }, st.header_timeouts)
        set({ "idle" }, st.idle_closes)
      end)
    reg:counter("obleth_http_accept_errors_total", "accept() calls that failed (e.g. out of descriptors)", nil,
      function(set) set({}, (sstats or http.server_stats()).accept_errors) end)
  end
end

return M
