-- The job's last words on the harness cluster (docs/replicas-and-failures.md): a launch whose engine
-- is not installed (the library vLLM recipe: the harness has no vllm) ends with exit 127, and
-- GET /api/v1/replicas/{id}/log answers the shell's own "not found" line from the job's stderr, the
-- class "command not found" and where the whole log is, by both ways the lines reach obleth serve:
-- read from the job log dir (mounted on serve's host: the harness's case) and reported by the job
-- itself when it exits (stdout / stderr outside that dir, as on a site where it is not mounted).
local util = require "spec.support.util"
local wait_until, sh = util.wait_until, util.sh
local harness = require "spec.support.harness"
local provisioner = require "spec.support.provisioner"

describe("a replica's job log on the harness cluster", function()
  if not harness.URL then
    it("needs the harness cluster", function() pending("harness cluster not running") end)
    return
  end

  local cluster, srv, prov, elsewhere

  local function ok(method, path, body)
    local status, doc, raw = srv:request(method, path, body)
    assert(status and status < 300, ("%s %s -> %s %s"):format(method, path, tostring(status), tostring(raw)))
    return doc
  end

  setup(function()
    cluster = harness.start { port_range = { 23000, 23999 } }
    srv = cluster.srv
    elsewhere = os.tmpname()
    os.remove(elsewhere)
    os.execute("mkdir -p " .. util.shq(elsewhere) .. " && chmod 1777 " .. util.shq(elsewhere))
    prov = provisioner.start { base = srv.base, token = srv.token }
  end)

  teardown(function()
    if prov then prov:stop() end
    if cluster then cluster:stop() end
    if elsewhere then os.execute("rm -rf " .. util.shq(elsewhere)) end
  end)

  -- the first ended replica of a model, once it has ended (its log answer with it)
  local function first_end(model_id)
    local rep
    wait_until(function()
      local reps = ok("GET", "/api/v1/models/" .. model_id .. "/replicas").replicas
      for _, r in ipairs(reps) do
        if (r.state == "ended" or r.state == "lost") and r["end"] ~= nil then rep = r return true end
      end
      return false
    end, 120, "a replica of model " .. model_id .. " ended")
    return rep
  end

  local function stream(doc, name)
    for _, s in ipairs(doc.streams) do if s.stream == name then return s end end
    error("no stream " .. name)
  end

  local function says_not_found(lines)
    for _, l in ipairs(lines) do
      if l:find("vllm: command not found", 1, true) or l:find("vllm: not found", 1, true) then return l end
    end
    return nil
  end

  it("vLLM where it is not installed: the stderr's 'not found' line, read from the mounted job log dir, "
    .. "as soon as the replica is ended", function()
    local l = ok("POST", "/api/v1/deployments/launch", { recipe_id = "vllm", api_model_name = "no-vllm",
      values = { replicas = 1, time_limit = "5", gpus_per_node = 1, inputs = { model = "/models/none" } } })
    local id = l.model.id
    local rep = first_end(id)
    assert.equal(127, rep["end"].exit_code)
    -- the first time the replica is seen ended, its log already says why
    local doc = ok("GET", "/api/v1/replicas/" .. rep.id .. "/log")
    local err = stream(doc, "stderr")
    assert.equal("log_dir", err.source, require("cjson").encode(err))
    -- the recipe's %x-%j.err in the log dir: the job's name (its tag) and id
    assert.equal(("%s/%s-%d.err"):format(cluster.logdir, "obleth-" .. cluster.instance .. "-m" .. id .. "-s1-" .. rep.nonce,
      rep.job_id), err.path)
    local line = says_not_found(err.lines)
    assert.is_string(line, "stderr: " .. table.concat(err.lines, " | "))
    -- the same line as in the file on the cluster (read here with the shell, not with obleth)
    local _, file = sh("cat " .. util.shq(err.path))
    assert.truthy(file:find(line, 1, true))
    assert.equal("command_not_found", doc.failure.class)
    assert.equal("command not found", doc.failure.title)
    assert.equal(line, doc.failure.engine)
    assert.is_false(doc.failure.node_fault)
    assert.equal("/docs/replicas-and-failures#command-not-found", doc.failure.doc)

    -- two or more such ends: From past runs suggests avoiding no node (a missing command fails on every node)
    wait_until(function()
      local n = 0
      for _, o in ipairs(ok("GET", "/api/v1/deployments/launches?model_id=" .. id).launches[1].outcomes) do
        if o.exit_code == 127 then n = n + 1 end
      end
      return n >= 2
    end, 120, "two ends with exit code 127")
    local pv = ok("POST", "/api/v1/deployments/preview", { recipe_id = "vllm",
      values = { gpus_per_node = 1, inputs = { model = "/models/none" } } })
    for _, sug in ipairs(pv.suggestions) do assert.are_not.equal("avoid_node", sug.kind, sug.message) end
    ok("DELETE", "/api/v1/models/" .. id .. "/managed")
  end)

  it("a job whose output is outside the mounted dir reports its last lines itself when it exits, "
    .. "with its own token only", function()
    local m = ok("POST", "/api/v1/models", { name = "reports-itself" })
    ok("PUT", "/api/v1/models/" .. m.id .. "/managed?check=false", { replicas = 1, time_limit = 5,
      launch_command = "echo 'starting up, HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123'; no-such-engine-x --port $OBLETH_PORT",
      stdout = elsewhere .. "/r-%j.out", stderr = elsewhere .. "/r-%j.err" })
    local rep = first_end(m.id)
    local doc
    wait_until(function()
      doc = ok("GET", "/api/v1/replicas/" .. rep.id .. "/log")
      return stream(doc, "stderr").source == "job"
    end, 30, "the job's own report of its stderr")
    local err, out = stream(doc, "stderr"), stream(doc, "stdout")
    assert.equal(("%s/r-%d.err"):format(elsewhere, rep.job_id), err.path)
    assert.truthy(table.concat(err.lines, "\n"):find("no-such-engine-x: command not found", 1, true))
    assert.equal("job", out.source)
    local said = table.concat(out.lines, "\n")
    assert.truthy(said:find("starting up", 1, true))
    assert.is_nil(said:find("hf_abcdefghijklmnopqrstuvwxyz0123", 1, true), "a token-shaped word is redacted")
    assert.equal("command_not_found", doc.failure.class)

    -- the report route takes the replica's own token only: not the admin token, not another replica's
    local token = require("obleth.api.replica_logs").token(srv.token, rep.nonce)
    local url = srv.base .. "/api/v1/replica-logs/" .. rep.nonce .. "/stderr"
    local function put(tok)
      local _, code = sh(("curl -s -o /dev/null -w '%%{http_code}' -X PUT -H %s --data-binary 'x' %s"):format(
        util.shq("Authorization: Bearer " .. tok), util.shq(url)))
      return code
    end
    assert.equal("401", put(srv.token))
    assert.equal("401", put(require("obleth.api.replica_logs").token(srv.token, "0000000000000000")))
    assert.equal("204", put(token))
    -- and it never shows in Slurm's description of the job
    local _, shown = sh("scontrol show job " .. rep.job_id .. " 2>&1")
    assert.is_nil(shown:find(token, 1, true))
    ok("DELETE", "/api/v1/models/" .. m.id .. "/managed")
  end)
end)
