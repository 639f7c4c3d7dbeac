--- The provisioner protocol (docs/managed-spec.md): one snapshot read and one
-- report per pass. The snapshot is the only answer that carries secrets.
local errors = require "obleth.api.errors"
local validate = require "obleth.deployment.input"

local M = {}

local function snapshot(ctx)
  local app = ctx.app
  local s = app:slurm_settings()
  local doc = app.store:snapshot(math.floor(app.now()))
  doc.settings = {
    enabled = s.enabled, url = s.url, socket = s.socket, user = s.user, token = s.token, verify = s.verify,
    ca_file = s.ca_file, api_version = s.api_version, timeout = s.timeout, defaults = s.defaults,
  }
  for _, k in ipairs({ "url", "socket", "user", "token", "ca_file" }) do
    if doc.settings[k] == nil then doc.settings[k] = require("cjson").null end
  end
  for _, k in ipairs({ "model_cache_dir", "image_dir", "log_dir", "partition", "account", "qos", "hf_token" }) do
    if s.defaults[k] == nil then s.defaults[k] = require("cjson").null end
  end
  return 200, doc, { ["Cache-Control"] = "no-store, private" }
end

local function report(ctx)
  local b, st, eb = errors.need_object(ctx)
  if not b then return st, eb end
  local rep, err = validate.report(b)
  if not rep then return errors.invalid(err) end
  local res, serr = ctx.app.store:apply_report(rep, ctx.app.now())
  if not res then return errors.store(serr) end
  if rep.pass.error and rep.pass.error ~= require("cjson").null then
    ctx.app.log.warn("provisioner_pass_failed", { error = rep.pass.error })
  end
  if #res.ignored > 0 then
    ctx.app.log.warn("provisioner_report_ignored", { count = #res.ignored })
  end
  -- what the pass changed, for the event streams: the check-in always, the rest per model
  local changes = { { "provisioner" } }
  for _, topic in ipairs({ "replicas", "models", "managed", "launches" }) do
    local ids = {}
    for id in pairs(res.changes[topic]) do ids[#ids + 1] = id end
    table.sort(ids)
    for _, id in ipairs(ids) do changes[#changes + 1] = { topic, id } end
  end
  ctx.changes = changes
  res.changes = nil
  return 200, res
end

M.routes = {
  { "GET", "/api/v1/provisioner/snapshot", snapshot,
    summary = "Everything one provisioner pass needs (carries the JWT and the Hugging Face token)" },
  { "POST", "/api/v1/provisioner/report", report, body = "ProvisionerReport", changes = { "provisioner" },
    summary = "The outcome of one pass: check-in, replica changes, job outcomes, endpoints, errors" },
}

return M
