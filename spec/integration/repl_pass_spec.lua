-- obleth repl as an operator uses it on this product, through a real
-- pseudo-terminal (tmux, on a socket of its own) against the harness cluster
-- and obleth serve: the banner, help(), plan() (a dry run of the next pass
-- that sends nothing), policy.try on an edited lost rule and on a broken
-- file, and a write that asks first. Slow: the scenario runs real jobs.
local util = require "spec.support.util"
local harness = require "spec.support.harness"
local scenario = require "spec.support.repl_scenario"
local loop = require "obleth.loop"
local sys = require "obleth.sys"
local sh, shq = util.sh, util.shq

describe("obleth repl against the live cluster and the Management API", function()
  if not harness.URL then
    it("needs the harness cluster", function() pending("harness cluster not running (OBLETH_SLURM_URL unset)") end)
    return
  end
  if sh("command -v tmux") ~= 0 then
    it("needs tmux", function() pending("tmux is not installed") end)
    return
  end

  -- a tmux server of its own, its socket in the spec's directory (removed with it)
  local tmux
  local s, dir
  local function screen(session)
    return select(2, sh(("%s capture-pane -p -J -t %s"):format(tmux, session)))
  end
  local function send(session, ...)
    local keys = {}
    for i, k in ipairs({ ... }) do keys[i] = shq(k) end
    sh(("%s send-keys -t %s %s"):format(tmux, session, table.concat(keys, " ")))
  end
  -- type a line after clearing the screen (readline's C-l), so the screen holds only its answer
  local function line(session, text)
    send(session, "C-l")
    send(session, "-l", text)
    send(session, "Enter")
  end
  local function wait_for(session, text, secs)
    local t_end = loop.monotonic() + (secs or 20)
    repeat
      local scr = screen(session)
      if scr:find(text, 1, true) then return scr end
      loop.sleep(0.2)
    until loop.monotonic() > t_end
    error(("%q never showed; the screen:\n%s"):format(text, screen(session)), 2)
  end
  local function start(session, extra)
    local cmd = ("env -u OBLETH_SLURM_URL -u OBLETH_SLURM_TOKEN -u OBLETH_SLURM_USER HOME=%s TERM=xterm "
      .. "OBLETH_ADMIN_BASE_URL=%s OBLETH_ADMIN_TOKEN=%s OBLETH_POLICY_DIR=%s %s repl %s"):format(shq(dir),
      shq(s.h.srv.base), shq(s.h.srv.token), shq(dir .. "/policy.d"), shq(util.obleth()), extra or "")
    assert.equal(0, (sh(("%s new-session -d -s %s -x 250 -y 80 %s"):format(tmux, session, shq(cmd)))))
  end
  local function live_ids()
    local ids = {}
    for _, j in ipairs(s.h:live_jobs()) do ids[#ids + 1] = j.id end
    table.sort(ids)
    return table.concat(ids, ",")
  end

  setup(function()
    dir = os.tmpname()
    os.remove(dir)
    tmux = "tmux -S " .. shq(dir .. "/tmux-" .. sys.getpid())
    os.execute("mkdir -p " .. shq(dir .. "/policy.d") .. " " .. shq(dir .. "/edit") .. " " .. shq(dir .. "/broken"))
    -- the site's lost rule waits an hour before resubmitting a failed start (so gamma waits, whenever this runs)
    local f = assert(io.open(dir .. "/policy.d/lost.lua", "w"))
    f:write("return { DEFAULTS = { backoff_base = 3600, backoff_max = 7200 } }\n")
    f:close()
    s = scenario.start { port_range = { 23600, 23699 } }
    start("ro")
  end)

  teardown(function()
    if tmux then sh(tmux .. " kill-server") end
    if s then s:stop() end
    if dir then os.execute("rm -rf " .. shq(dir)) end
  end)

  it("the banner says where it is connected, the cluster, API version, Slurm user and that writes are refused", function()
    local scr = wait_for("ro", "writes      refused")
    assert.matches("slurmrestd%s+" .. harness.URL:gsub("%p", "%%%0") .. " %(the connection saved in obleth serve at "
      .. s.h.srv.base:gsub("%p", "%%%0") .. "%)", scr)
    assert.matches("cluster%s+obleth%s+API " .. harness.API_VERSION:gsub("%p", "%%%0") .. "%s+Slurm "
      .. harness.RELEASE:gsub("%p", "%%%0") .. "%.%d+", scr)
    assert.matches("Slurm user%s+obleth%s+JWT expires", scr)
    assert.matches("Management API%s+" .. s.h.srv.base:gsub("%p", "%%%0"), scr)
    assert.is_nil(scr:find(harness.TOKEN, 1, true), "the JWT is on screen")
    assert.is_nil(scr:find(s.h.srv.token, 1, true), "the admin token is on screen")
  end)

  it("help() lists the handles with one-line docs from the annotations, help(name) one function", function()
    line("ro", "help()")
    local scr = wait_for("ro", "Tab completes names")
    assert.matches("slurm%.nodes%(%)%s+Every node: name, state", scr)
    assert.matches("api%.replicas%(opts%)%s+Replicas: every one", scr)
    assert.matches("policy%.try%(path, name%)%s+Load an edited policy file without installing it", scr)
    assert.matches("plan%(%)%s+A dry run of the provisioner's next pass", scr)
    line("ro", "help('policy.try')")
    scr = wait_for("ro", "examples:")
    assert.matches("@param path string", scr)
  end)

  it("plan() names the missing replica it would submit and the surplus one it would cancel, and sends nothing", function()
    local before = live_ids()
    local surplus = s.jobs.alpha[2]
    line("ro", "plan()")
    local scr = wait_for("ro", "would be sent")
    assert.matches("1 submit%(s%), 1 cancel%(s%) would be sent", scr)
    assert.matches("\nsubmit%s+beta%s+1%s+missing replica%s+slot 1 has no live job", scr)
    assert.matches("\ncancel job " .. surplus .. "%s+alpha%s+2%s+surplus replica%s+slot 2 is above the spec's replicas = 1",
      scr)
    -- each replica with its state now and after the pass
    assert.matches("\nalpha%s+2%s+" .. surplus .. "%s+%S+%s+%S+%s+ending", scr)
    assert.matches("\nbeta%s+1%s+%-%s+%-%s+%-%s+pending", scr)
    -- nothing was sent: Slurm's job list is what it was, beta has no job, alpha's surplus job still runs
    assert.equal(before, live_ids())
    assert.same({}, s.h:live_jobs(s.ids.beta))
    local still = false
    for _, j in ipairs(s.h:live_jobs(s.ids.alpha)) do if j.id == surplus then still = true end end
    assert.is_true(still)
    local _, reps = s.h.srv:request("GET", ("/api/v1/models/%d/replicas"):format(s.ids.beta))
    assert.same({}, reps.replicas or reps)
  end)

  it("policy.try on an edit lowering the lost threshold shows the replica that would become lost", function()
    local f = assert(io.open(dir .. "/edit/lost.lua", "w"))
    f:write("-- lose a slot after its first failed start\n"
      .. "return { DEFAULTS = { k = 1, backoff_base = 3600, backoff_max = 7200 } }\n")
    f:close()
    local before = live_ids()
    line("ro", ("policy.try(%q)"):format(dir .. "/edit/lost.lua"))
    local scr = wait_for("ro", "DEPLOYMENT")
    assert.matches("%*%s+gamma slot 1%s+wait %(backoff%)%s+mark lost", scr)
    assert.matches("\nmark lost %(job " .. s.jobs.gamma .. "%)%s+gamma%s+1%s+lost%s+1 end%(s%) in a row without "
      .. "becoming healthy >= k = 1; job " .. s.jobs.gamma .. " CANCELLED", scr)
    assert.matches("\n%s+alpha%s+fit %(gpu%)%s+fits: 4 fitting node%(s%)", scr)
    assert.equal(before, live_ids())
    -- not installed: the policy in use is unchanged
    line("ro", "policy.get('lost').DEFAULTS.k")
    assert.truthy(wait_for("ro", "\n3\n"))
  end)

  it("policy.try on a broken file shows its error and line", function()
    local f = assert(io.open(dir .. "/broken/lost.lua", "w"))
    f:write("return {\n  DEFAULTS = { k = = 1 },\n}\n")
    f:close()
    line("ro", ("policy.try(%q)"):format(dir .. "/broken/lost.lua"))
    local scr = wait_for("ro", "does not load")
    assert.truthy(scr:find(dir .. "/broken/lost.lua:2: unexpected symbol near '='", 1, true), scr)
  end)

  it("slurm.nodes() prints rows of name, state, CPUs, memory and GPUs free by type", function()
    line("ro", "slurm.nodes()")
    local scr = wait_for("ro", "GPUS FREE")
    assert.matches("\nn3%s+%S+%s+%d+/8%s+%d+/32000%s+h100 %d/8%s+h100", scr)
  end)

  it("with --write, a cancel names the job it would cancel and asks once; No leaves the job running", function()
    start("rw", "--write")
    wait_for("rw", "writes      ALLOWED")
    local id = s.jobs.alpha[1]
    line("rw", ("slurm.cancel(%d)"):format(id))
    local scr = wait_for("rw", "[y/N]")
    assert.matches("cancel job " .. id .. " %(obleth%-", scr)
    send("rw", "n", "Enter")
    wait_for("rw", "not done")
    local still = false
    for _, j in ipairs(s.h:live_jobs(s.ids.alpha)) do if j.id == id then still = true end end
    assert.is_true(still)
  end)
end)
