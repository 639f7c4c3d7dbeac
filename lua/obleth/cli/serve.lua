--- `obleth serve`: the command line of the process obleth.serve builds (the Management API, the
--- router and the dashboard over the store).
---
--- Settings: --listen HOST:PORT (env OBLETH_LISTEN, default 127.0.0.1:8080),
--- --db PATH|URL (env OBLETH_DATABASE_URL for PostgreSQL, else OBLETH_DB, default ./obleth.db or
--- $STATE_DIRECTORY/obleth.db),
--- the admin token from OBLETH_ADMIN_TOKEN (or a file named by OBLETH_ADMIN_TOKEN_FILE).
--- Exit status: 0 after SIGTERM/SIGINT, 1 when the database or the port fails, 2 for bad usage.
local args = require "obleth.util.args"

local M = {}

M.usage = [[
usage: obleth serve [--listen HOST:PORT] [--db PATH|URL] [--body-limit BYTES]
                    [--web-dir DIR] [--public-url URL] [--max-connections N]

The Management API, the OpenAI-compatible router and the dashboard (open / in a
browser and sign in with the admin token). Every /api/ route needs
Authorization: Bearer <admin token> (or the dashboard's session cookie);
the token comes from the environment (never a flag: it would show in ps):

  OBLETH_ADMIN_TOKEN       the admin token (at least 16 characters)
  OBLETH_ADMIN_TOKEN_FILE  or a file holding it
  OBLETH_LISTEN            default for --listen (127.0.0.1:8080)
  OBLETH_DATABASE_URL      default for --db: postgresql://USER:PASSWORD@HOST:PORT/DB
                           (PostgreSQL; several obleth serve may share it)
  OBLETH_DB                else default for --db (./obleth.db, SQLite)
  OBLETH_WEB_DIR           default for --web-dir (build/web in a source tree,
                           else PREFIX/share/obleth/web)
  OBLETH_PUBLIC_URL        default for --public-url
  OBLETH_MAX_CONNECTIONS   default for --max-connections (half the descriptor
                           limit less 32, at least 16)
  OBLETH_HEADER_TIMEOUT    seconds a request's header section may take (10)
  OBLETH_IDLE_TIMEOUT      seconds a kept-alive connection may wait idle (5)
  OBLETH_NOFILE            descriptors to raise the soft limit to, up to the hard
                           limit (65536; never lowered)
  OBLETH_LOAD_SHARE_INTERVAL  on PostgreSQL: seconds between two publishes of this
                           instance's load window for the others (5)
  OBLETH_LOAD_SHARE_EXPIRY    on PostgreSQL: seconds after its last publish an
                           instance stops counting (15; at least twice the interval)
]]

local spec = {
  listen = { kind = "string", arg = "HOST:PORT", help = "address to listen on (default 127.0.0.1:8080)" },
  db = { kind = "string", arg = "PATH|URL",
    help = "SQLite database file (created when missing), or a postgresql:// URL" },
  body_limit = { kind = "integer", arg = "BYTES", help = "largest request body (default 1048576)" },
  web_dir = { kind = "string", arg = "DIR", help = "the built dashboard (index.html, assets/)" },
  public_url = { kind = "string", arg = "URL",
    help = "the URL people open the dashboard at, when a proxy in front changes it (https: Secure cookies)" },
  max_connections = { kind = "integer", arg = "N",
    help = "open client connections at most (default: half the descriptor limit less 32)" },
  help = { kind = "boolean", short = "h", help = "this help" },
}

-- a number from the environment (nil when unset), or nil, {code = "invalid", field = name, message}
local function _env_number(name, lo, hi, integer)
  local v = os.getenv(name)
  if v == nil or v == "" then return nil end
  local n = tonumber(v)
  if not n or n ~= n or n < lo or n > hi or (integer and math.tointeger(n) == nil) then
    return nil, { code = "invalid", field = name,
      message = ("%s=%q: expected %s %s..%s"):format(name, v, integer and "an integer" or "seconds", lo, hi) }
  end
  return integer and math.tointeger(n) or n
end

--- Split HOST:PORT ("[::1]:8080" for IPv6).
---@return string|nil host, integer|table port_or_err err {code = "invalid", field = "listen", message}
function M.parse_listen(s)
  local host, port = s:match("^%[([%x:]+)%]:(%d+)$")
  if not host then host, port = s:match("^([^:]+):(%d+)$") end
  if not host then
    return nil, { code = "invalid", field = "listen",
      message = ("--listen %q: expected HOST:PORT (e.g. 127.0.0.1:8080 or [::1]:8080)"):format(s) }
  end
  local p = math.tointeger(tonumber(port))
  if not p or p > 65535 then
    return nil, { code = "invalid", field = "listen", message = ("--listen %q: the port must be 0..65535"):format(s) }
  end
  return host, p
end

local function _die(msg, code)
  io.stderr:write("obleth serve: ", msg, "\n")
  return code or 1
end

--- The admin token from the environment, or nil and an error saying how to set one.
---@param env fun(name: string): string|nil defaults to os.getenv
---@return string|nil token, table|nil err {code = "not_configured"|"token_file"|"invalid", message}
function M.admin_token(env)
  env = env or os.getenv
  local tok = env("OBLETH_ADMIN_TOKEN")
  local file = env("OBLETH_ADMIN_TOKEN_FILE")
  if (not tok or tok == "") and file and file ~= "" then
    local fh, err = io.open(file)
    if not fh then return nil, { code = "token_file", message = "cannot read OBLETH_ADMIN_TOKEN_FILE: " .. tostring(err) } end
    tok = (fh:read("a") or ""):gsub("%s+$", "")
    fh:close()
  end
  if not tok or tok == "" then
    return nil, { code = "not_configured", message = "no admin token: set OBLETH_ADMIN_TOKEN (for example: "
      .. "export OBLETH_ADMIN_TOKEN=$(openssl rand -hex 32)) or OBLETH_ADMIN_TOKEN_FILE to a file holding it" }
  end
  if #tok < 16 or tok:find("%s") then
    return nil, { code = "invalid",
      message = "the admin token must be at least 16 characters without spaces (try: openssl rand -hex 32)" }
  end
  return tok
end

function M.main(argv)
  local o, perr = args.parse(argv or {}, spec)
  if not o then return _die(perr .. "\n\n" .. M.usage, 2) end
  if o.help then io.stdout:write(M.usage, "\noptions:\n", args.help(spec), "\n"); return 0 end
  if o[1] then return _die(("unexpected argument %q\n\n%s"):format(o[1], M.usage), 2) end
  local listen = o.listen or os.getenv("OBLETH_LISTEN") or "127.0.0.1:8080"
  local host, port = M.parse_listen(listen)
  if not host then return _die(port.message, 2) end
  local token, terr = M.admin_token()
  if not token then return _die(terr.message, 2) end
  local body_limit = o.body_limit or 1048576
  if body_limit < 1024 then return _die("--body-limit must be at least 1024", 2) end
  local max_conns, header_timeout, idle_timeout, eerr
  max_conns, eerr = _env_number("OBLETH_MAX_CONNECTIONS", 1, 16777216, true)
  if eerr then return _die(eerr.message, 2) end
  max_conns = o.max_connections or max_conns
  if max_conns and (max_conns < 1 or max_conns > 16777216) then return _die("--max-connections must be 1..16777216", 2) end
  local nofile_want
  nofile_want, eerr = _env_number("OBLETH_NOFILE", 64, 16777216, true)
  if eerr then return _die(eerr.message, 2) end
  header_timeout, eerr = _env_number("OBLETH_HEADER_TIMEOUT", 0.1, 3600)
  if eerr then return _die(eerr.message, 2) end
  idle_timeout, eerr = _env_number("OBLETH_IDLE_TIMEOUT", 0.1, 3600)
  if eerr then return _die(eerr.message, 2) end
  local share_interval, share_expiry
  share_interval, eerr = _env_number("OBLETH_LOAD_SHARE_INTERVAL", 0.1, 300)
  if eerr then return _die(eerr.message, 2) end
  share_expiry, eerr = _env_number("OBLETH_LOAD_SHARE_EXPIRY", 0.2, 3600)
  if eerr then return _die(eerr.message, 2) end
  do
    local ls = require "obleth.serve.load_share"
    if (share_expiry or ls.EXPIRY) < 2 * (share_interval or ls.INTERVAL) then
      return _die(("OBLETH_LOAD_SHARE_EXPIRY=%s: must be at least twice OBLETH_LOAD_SHARE_INTERVAL (%s s)"):format(
        tostring(share_expiry or ls.EXPIRY), tostring(share_interval or ls.INTERVAL)), 2)
    end
  end
  local public_url = o.public_url or os.getenv("OBLETH_PUBLIC_URL")
  if public_url == "" then public_url = nil end
  local serve = require "obleth.serve"
  if public_url and not serve.origin_of(public_url) then
    return _die(("--public-url %q: expected http(s)://HOST[:PORT]"):format(public_url), 2)
  end
  -- a trusted proxy in front that names the user (docs/access.md)
  local auth_proxy, aperr = require("obleth.api.access").proxy_from_env()
  if aperr then return _die(aperr.message, 2) end
  -- the site's directory, to sign users in with (docs/access.md "LDAP")
  local ldap_cfg, lerr = require("obleth.api.ldap").from_env()
  if lerr then return _die(lerr.message, 2) end
  local state_dir = os.getenv("STATE_DIRECTORY")
  local db_url = os.getenv("OBLETH_DATABASE_URL")
  if db_url == "" then db_url = nil end
  local dbpath = o.db or db_url or os.getenv("OBLETH_DB")
    or ((state_dir and state_dir:match("^[^:]+") or ".") .. "/obleth.db")

  local log = require "obleth.log"
  local loop = require "obleth.loop"
  local http = require "obleth.http"
  local sys = require "obleth.sys"
  log.add_secret(token)

  local store, serr = require("obleth.store").open(dbpath, { log = log })
  if not store then return _die(serr.message, serr.code == "invalid" and 2 or 1) end
  local web_dir = o.web_dir or os.getenv("OBLETH_WEB_DIR")
  if web_dir == "" then web_dir = nil end
  web_dir = web_dir or require("obleth.web").default_dir()
  local process = serve.new { store = store, admin_token = token, log = log, web_dir = web_dir,
    public_url = public_url, max_streams = math.tointeger(tonumber(os.getenv("OBLETH_EVENTS_MAX_STREAMS") or "")),
    auth_proxy = auth_proxy, ldap = ldap_cfg,
    load_share = store.shared and { interval = share_interval, expiry = share_expiry } or false }
  local ctx = process.context
  ctx.body_limit = body_limit -- the lease answer says it (a provisioner splits a larger report)
  local handler = process:handler()
  -- the descriptor limit: raised (never lowered) to OBLETH_NOFILE, at most the hard limit; the
  -- connection cap's default is read from it
  local nofile = sys.nofile()
  if nofile < (nofile_want or 65536) then nofile = sys.nofile(nofile_want or 65536) or nofile end
  local srv, berr, bcode = http.server { host = host, port = port, handler = handler, body_limit = body_limit,
    max_connections = max_conns, header_timeout = header_timeout, idle_timeout = idle_timeout }
  if not srv then
    store:close()
    return _die(("%s (%s)"):format(tostring(berr), tostring(bcode)), 1)
  end
  local url = (host:find(":", 1, true) and "http://[%s]:%d" or "http://%s:%d"):format(host, srv:port())
  log.info("serve_started", { listen = url, db = store.location, schema = store:schema_version(), pid = sys.getpid(),
    routes = #process.routes, web_dir = web_dir, auth_proxy = auth_proxy and auth_proxy.header or nil,
    auth_proxy_from = auth_proxy and auth_proxy.from_text or nil,
    ldap = ldap_cfg and ldap_cfg.url or nil, nofile = nofile, max_connections = max_conns or "default",
    header_timeout = header_timeout or 10, idle_timeout = idle_timeout or 5 })
  local wst = sys.stat(web_dir .. "/index.html")
  if not wst then
    log.warn("dashboard_not_built", { web_dir = web_dir,
      hint = "run make in the source tree, or set --web-dir / OBLETH_WEB_DIR" })
  end
  io.stdout:write(("obleth serve listening on %s\n"):format(url))
  io.stdout:flush()
  pcall(sys.sd_notify, "READY=1")

  local stopping = false
  local handles = {}
  -- several obleth serve on one PostgreSQL: the changes each makes reach the others' browsers
  local follow = ctx:follow_changes(function() process.router:invalidate() end)
  if follow then handles[#handles + 1] = { cancel = follow.close } end
  -- the client keys' usage the router counted goes to the store every few seconds, and at the end
  local router = process.router
  handles[#handles + 1] = loop.every(require("obleth.router").USAGE_FLUSH, function() router:flush_usage() end)
  -- several obleth serve on one PostgreSQL: this instance's load window goes to the others, theirs
  -- comes back (one upsert and one read per interval; obleth.serve.load_share)
  local share = process.load_share
  if share then
    loop.spawn(function() share:publish() end)
    handles[#handles + 1] = loop.every(share.interval, function() share:publish() end)
    log.info("load_share_started", { instance = share.id, interval = share.interval, expiry = share.expiry })
  end
  -- each model's load and replicas, minute by minute, for the deployment page's chart
  handles[#handles + 1] = loop.every(require("obleth.deployment.load_history").SAMPLE,
    function() process:sample_load() end)
  for _, sig in ipairs({ "TERM", "INT" }) do
    handles[#handles + 1] = loop.on_signal(sig, function(name)
      if stopping then return end
      stopping = true
      -- no new connections; requests in flight finish (keep-alive
      -- connections still open get 503 shutting_down)
      srv:stop_listening()
      process:drain()
      log.info("serve_stopping", { signal = name, inflight = ctx.inflight })
      loop.spawn(function()
        local t0 = loop.monotonic()
        while ctx.inflight > 0 and loop.monotonic() - t0 < 15 do loop.sleep(0.02) end
        -- the others stop counting this instance's load now, not after its expiry
        if share then share:withdraw() end
        loop.stop(0)
      end)
    end)
  end
  -- each request leaves short-lived tables: the generational collector (Lua 5.4)
  -- takes them young, with shorter pauses than the incremental one
  collectgarbage("generational")
  local code = loop.run()
  for _, h in ipairs(handles) do h:cancel() end
  srv:close()
  router:flush_usage()
  store:close()
  log.info("serve_stopped", { exit = code })
  return code
end

return M
