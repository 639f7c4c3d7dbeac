--- obleth.slurm — talk to slurmrestd and get one normalized picture of the
-- cluster whatever API version the site runs (v0.0.38 to v0.0.46: `known_versions`, the
-- host's one list; the newest both sides know is negotiated).
--
-- The transport (JWT headers, HTTP(S) or unix socket, version discovery and
-- renegotiation, error kinds) is the host's C module `obleth.slurm.rest`;
-- the per-version shapes are mapped by `obleth.slurm.normalize` and request
-- bodies built by `obleth.slurm.submit`. Every call is a single request
-- (except job(id), which falls back to the accounting database once when the
-- controller has forgotten a finished job) and must run inside a task.
--
-- Errors never raise on server behaviour: calls return `nil, err` with
-- err.code (docs/errors.md) one of
--   "unreachable"  no connection (refused, DNS, TLS)       err.message
--   "timeout"      no answer within the connection's timeout
--   "auth"         missing, bad or expired token (err.expired = true when the
--                  JWT's exp has passed), whatever HTTP code the release uses
--   "refused"      Slurm said no: err.slurm_code (Slurm errno), err.message, and
--                  err.field = the desc field it is about when that can be told
--   "bad_response" an answer that is not what the API documents
--   "unsupported"  a desc field or call this API version cannot express (err.field), or a
--                  slurmrestd that serves none of the versions obleth knows (the message names them)
--   "no_accounting" an accounting (/slurmdb/) call to a cluster without slurmdbd accounting
local rest = require "obleth.slurm.rest"
local normalize = require "obleth.slurm.normalize"
local submit = require "obleth.slurm.submit"
local jwt = require "obleth.slurm.jwt"
local cjson = require "cjson"
local jsonscan = require "obleth.jsonscan"

local M = {}

M.known_versions = rest.known_versions
M.capabilities = submit.capabilities
M.never_starts = submit.never_starts

--- Seconds since the epoch at which a JWT expires (its `exp` claim, read
--- without verification), or nil, message.
---@param token string
---@return integer|nil exp, table|nil err {code = "invalid_token"|"no_expiry", message}
function M.token_expiry(token)
  return jwt.token_expiry(token)
end

local Conn = {}
Conn.__index = Conn

--- Connect to slurmrestd and negotiate the API version.
---@param opts {url: string|nil, socket: string|nil, user: string|nil, token: string|nil,
---  version: string|nil, timeout: number|nil, ca_file: string|nil, verify: boolean|nil}
---  exactly one of url / socket; version "auto" (default) or one of `known_versions`;
---  timeout in seconds per request (default 10); TLS verification is on unless verify = false
---@return table|nil conn, table|nil err
function M.connect(opts)
  if type(opts) ~= "table" then error("slurm.connect: expects a table of options", 2) end
  -- the JWT's expiry, decoded here once: the transport refuses a token past it without a request
  local o = {}
  for k, v in pairs(opts) do o[k] = v end
  o.token_expires_at = type(o.token) == "string" and jwt.token_expiry(o.token) or nil
  local c, err = rest.connect(o)
  if not c then return nil, err end
  return setmetatable({ _c = c }, Conn)
end

local function _bad(status, doc, what)
  local errs = normalize.errors(doc)
  local first = errs[1]
  local msg = ("%s: slurmrestd answered HTTP %s"):format(what, tostring(status))
  if status == 502 or status == 503 or status == 504 then
    -- slurmrestd is up and answered for slurmctld, which did not answer it
    msg = ("%s: slurmctld does not answer (slurmrestd answered HTTP %d)"):format(what, status)
  end
  if first and (first.message or first.description) then
    msg = msg .. ": " .. (first.message or first.description)
  end
  return nil, { code = "bad_response", http_status = status, message = msg, errors = errs }
end

-- GET path and normalize the answer with fn.
function Conn:_get(path, fn, what)
  local status, doc = self._c:call("GET", path)
  if not status then return nil, doc end
  if status ~= 200 or type(doc) ~= "table" then return _bad(status, doc, what) end
  local ok, res = pcall(fn, doc, self._c:version())
  if not ok then
    return nil, { code = "bad_response", message = what .. ": unexpected response shape: " .. tostring(res) }
  end
  return res
end

--- The negotiated API version, e.g. "v0.0.38".
function Conn:version() return self._c:version() end
--- The API versions the server serves (newest first).
function Conn:versions() return self._c:versions() end
--- {url, socket, user, version, timeout}; never the token.
function Conn:info() return self._c:info() end
--- Replace the token (e.g. after minting a fresh one).
function Conn:set_token(t) return self._c:set_token(t, (jwt.token_expiry(t))) end
--- How each desc field is sent on this connection's version (false = cannot be).
function Conn:capabilities() return submit.capabilities[self._c:version()] end

--- Ping the controller.
-- A controller that refused the credentials is `nil, {code = "auth"}`, not a controller that is
-- down: slurmrestd answers that ping with HTTP 200 and pinged DOWN / responding false. v0.0.45+
-- say so in `status`; on older versions one more request with the same token tells (the
-- accounting database's cluster list, which slurmdbd answers at once, else the controller's
-- statistics), and only when that is refused too is it `auth`.
---@return {ok: boolean, version: string, release: string|nil, hostname: string|nil, latency: number,
---  status: string|nil, rtt: number}|nil, table|nil err
function Conn:ping()
  local loop = require "obleth.loop"
  local t0 = loop.monotonic()
  local r, err = self:_get("/slurm/{v}/ping", normalize.ping, "ping")
  if not r then return nil, err end
  r.rtt = loop.monotonic() - t0 -- seconds, measured here
  local rejected = r.auth_rejected
  if not r.ok and not rejected and not r.status then
    local path = self._c:has_slurmdb() and "/slurmdb/{v}/clusters" or "/slurm/{v}/diag"
    local _, perr = self._c:call("GET", path)
    rejected = perr ~= nil and perr.code == "auth"
  end
  if rejected then
    return nil, { code = "auth", release = r.release, message = "slurmctld rejected the credentials "
      .. "(a bad, foreign or expired JWT): slurmrestd answered the ping with the controller "
      .. (r.status and ("not responding: " .. r.status) or "not responding") }
  end
  r.auth_rejected = nil
  return r
end

--- Every job the controller knows, in one request (callers filter).
---@param opts {keep: (fun(raw: table): boolean)|nil, cache: table|nil, prefilter: (fun(text: string): boolean)|nil}|nil
---  keep: only the raw records it keeps are normalized (obleth.slurm.normalize.jobs); cache: a table
---  the caller keeps between calls: the listing is then split into one keyed hash per job and a job
---  whose text did not change is not decoded again (obleth.slurm.normalize.jobs_cached: keep reads
---  only name and job_id then, prefilter skips a job without decoding it; the records are shared
---  between calls, read-only)
---@return table[]|nil jobs normalized (see obleth.slurm.normalize), table|nil err
function Conn:jobs(opts)
  local keep = opts and opts.keep
  if opts and opts.cache then
    -- one JSON text per job, and only a new or changed job of those kept is decoded
    local status, doc, raw = self._c:call_raw("GET", "/slurm/{v}/jobs")
    if not status then return nil, doc end
    if status ~= 200 then return _bad(status, doc, "jobs") end
    local ok, hashes, firsts, lasts = jsonscan.element_hashes(raw, "jobs")
    if not ok then
      return nil, { code = "bad_response", message = "jobs: slurmrestd answered with invalid JSON: " .. tostring(hashes) }
    end
    local nok, res = pcall(normalize.jobs_cached, { text = raw, hashes = hashes or {}, firsts = firsts, lasts = lasts },
      self._c:version(), keep, opts.prefilter, opts.cache)
    if not nok then
      return nil, { code = "bad_response", message = "jobs: unexpected response shape: " .. tostring(res) }
    end
    return res
  end
  if not keep then return self:_get("/slurm/{v}/jobs", normalize.jobs, "jobs") end
  return self:_get("/slurm/{v}/jobs", function(doc, version) return normalize.jobs(doc, version, keep) end, "jobs")
end

--- One job; when the controller has forgotten it (finished more than
--- MinJobAge ago), its record from the accounting database.
---@param id integer
function Conn:job(id)
  id = math.tointeger(id)
  if not id or id <= 0 then error("slurm job: id must be a positive integer", 2) end
  local status, doc = self._c:call("GET", "/slurm/{v}/job/" .. id)
  if not status then return nil, doc end
  if status == 200 and type(doc) == "table" then
    local ok, j = pcall(normalize.job, doc, self._c:version())
    if ok and j then return j end
  end
  -- 404 + error 2017 (v0.0.39+) or 500 (22.05): ask the accounting database
  local dstatus, ddoc = self._c:call("GET", "/slurmdb/{v}/job/" .. id)
  if not dstatus then return nil, ddoc end
  -- an unknown job is a 200 with no jobs; a 5xx is slurmdbd not answering: not "not known"
  if dstatus >= 500 then return _bad(dstatus, ddoc, "job " .. id .. " (accounting)") end
  if dstatus == 200 and type(ddoc) == "table" then
    local ok, j = pcall(normalize.db_job, ddoc, self._c:version())
    if ok and j then return j end
  end
  return nil, { code = "refused", http_status = status, slurm_code = 2017,
    message = ("job %d is not known to the controller or the accounting database"):format(id) }
end

--- Submit a batch job described by desc (see obleth.slurm.submit).
---@param desc table
---@return integer|nil job_id, table warnings_or_err warnings: array of {slurm_code?, message}
function Conn:submit(desc)
  local version = self._c:version()
  local body, berr = submit.body(desc, version)
  if not body then
    berr.code = berr.code == "unsupported" and "unsupported" or "refused"
    return nil, berr
  end
  return self:submit_body(body, desc)
end

--- Submit an already-built request body (as obleth.slurm.submit builds it
--- for this version). For tools and specs that need to send a property the
--- description cannot express; refusals are reported like submit's.
---@param body table
---@param desc table|nil the description it came from (to name the field of a refusal)
function Conn:submit_body(body, desc)
  local version = self._c:version()
  local status, doc, raw = self._c:call("POST", "/slurm/{v}/job/submit", cjson.encode(body))
  if not status then return nil, doc end
  local job_id, res = normalize.submit_response(doc, version, status)
  if job_id then return job_id, res end
  if res.code == "refused" then
    local field, candidates = submit.refusal_field(res.slurm_code, res.message, desc)
    res.field = res.key and M._field_for_key(res.key) or field
    res.candidates = candidates
  else
    res.code = "bad_response"
    if raw and #raw > 0 and not doc then res.message = res.message .. ": " .. raw:sub(1, 200) end
  end
  return nil, res
end

-- A request property slurmrestd rejected by name → the desc field.
function M._field_for_key(key)
  local map = { exclude_nodes = "exclude", excluded_nodes = "exclude", time_limit = "time_limit",
    gpus_per_node = "gpus_per_node", tres_per_node = "gpus_per_node", constraints = "constraint",
    memory_per_node = "memory_per_node", partition = "partition", account = "account", qos = "qos",
    nodes = "nodes", environment = "environment" }
  return map[key] or key
end

--- Cancel (signal) a job. signal: "KILL" (default) or "TERM", "INT", "USR1"...
-- Success is Slurm saying so: v0.0.40+ answer HTTP 200 whatever happened and put each job's
-- outcome in `status[]` (`error.code`, `error.message`: 2002 "Access/permission denied" for
-- another user's job, 2017 "Invalid job id specified" for an unknown one), so a 200 with an
-- error there is a refusal.
---@return true|nil, table|nil err {code = "refused", slurm_code, message, http_status}
function Conn:cancel(id, signal)
  id = math.tointeger(id)
  if not id or id <= 0 then error("slurm cancel: id must be a positive integer", 2) end
  signal = signal or "KILL"
  if not tostring(signal):match("^%u[%u%d]*$") then error("slurm cancel: bad signal name", 2) end
  local status, doc = self._c:call("DELETE", ("/slurm/{v}/job/%d?signal=%s"):format(id, signal))
  if not status then return nil, doc end
  local failed = status == 200 and normalize.cancel_failures(doc)[1]
  if status == 200 and not failed then return true end
  if failed then
    return nil, { code = "refused", http_status = status, slurm_code = failed.slurm_code,
      message = ("job %d: %s"):format(id, failed.message or ("Slurm error " .. tostring(failed.slurm_code))) }
  end
  local errs = normalize.errors(doc)
  return nil, { code = "refused", http_status = status, slurm_code = errs[1] and errs[1].slurm_code,
    message = errs[1] and (errs[1].message or errs[1].description) or ("HTTP " .. status) }
end

--- Every partition, those the user may not use and hidden ones too (normalize.partition_record:
-- name, node_list, max_time (minutes), max_nodes, allowed/denied accounts and QoS, AllowGroups,
-- hidden, qos, ...). Slurm lists only the partitions the token's user may see unless asked for
-- all (`?flags=ALL`, read from v0.0.40 on; 26.05 leaves AllowGroups partitions out without it).
-- v0.0.40-44 do not send the partition flags: there a second, plain listing tells which are
-- hidden (see normalize.mark_listed).
---@return table[]|nil partitions, table|nil err
function Conn:partitions()
  local v = require("obleth.slurm.versions").number(self._c:version())
  if v < 40 then return self:_get("/slurm/{v}/partitions", normalize.partitions, "partitions") end
  local all, err = self:_get("/slurm/{v}/partitions?flags=ALL", normalize.partitions, "partitions")
  if not all or v >= 45 then return all, err end
  local plain, perr = self:_get("/slurm/{v}/partitions", normalize.partitions, "partitions")
  if not plain then return nil, perr end
  return normalize.mark_listed(all, plain)
end
--- Every node: name, state, idle, cpus / alloc_cpus, memory / alloc_memory (MiB), gres, gres_free, features.
---@return table[]|nil nodes, table|nil err
function Conn:nodes() return self:_get("/slurm/{v}/nodes", normalize.nodes, "nodes") end
--- The controller's statistics (sdiag).
function Conn:diag() return self:_get("/slurm/{v}/diag", normalize.diag, "diag") end
--- A few settings of slurm.conf (normalize.conf: enforce_part_limits, cluster, min_job_age), from
--- `GET /slurm/vX/conf`, which v0.0.45 (Slurm 26.05) added; older versions: nil, unsupported.
---@return table|nil conf, table|nil err
function Conn:conf()
  if (require("obleth.slurm.versions").number(self._c:version()) or 0) < 45 then
    return nil, { code = "unsupported", message = "slurmrestd " .. self._c:version() .. " does not serve /conf "
      .. "(v0.0.45 and later do)" }
  end
  return self:_get("/slurm/{v}/conf", normalize.conf, "conf")
end
--- Every account in the accounting database.
function Conn:accounts() return self:_get("/slurmdb/{v}/accounts", normalize.accounts, "accounts") end
--- The clusters the accounting database knows: name, nodes (hostlist), controller {host, port}.
---@return table[]|nil clusters, table|nil err
function Conn:clusters() return self:_get("/slurmdb/{v}/clusters", normalize.clusters, "clusters") end
--- Every QoS: name, max_wall (minutes), ...
function Conn:qos() return self:_get("/slurmdb/{v}/qos", normalize.qos, "qos") end

--- Associations, optionally only a user's.
---@param opts {user: string|nil}|nil
function Conn:associations(opts)
  local path = "/slurmdb/{v}/associations"
  local user = opts and opts.user
  if user then
    if not tostring(user):match("^[%w._-]+$") then error("slurm associations: bad user name", 2) end
    path = path .. "?user=" .. user
  end
  return self:_get(path, normalize.associations, "associations")
end

return M
