-- `make demo` stops everything it started when its script gets SIGTERM — not only on Ctrl-C at a
-- terminal. The script runs in a tmux pane (a terminal on stdin, so it stays up after the replicas
-- are healthy, as it does for a person), against the harness cluster that the integration tier
-- already started (so the demo leaves the cluster up).
local slurm = require "obleth.slurm"
local tag = require "obleth.job.tag"
local util = require "spec.support.util"
local harness = require "spec.support.harness"

-- pids of live processes whose environment holds `marker` (the demo exports OBLETH_DEMO_STATE to
-- obleth serve and obleth-provisioner)
local function processes_with(marker)
  local pids = {}
  local ls = assert(io.popen("ls /proc"))
  for pid in ls:lines() do
    if pid:match("^%d+$") then
      local env = "\0" .. util.slurp("/proc/" .. pid .. "/environ") .. "\0"
      local st = util.slurp("/proc/" .. pid .. "/stat")
      if env:find("\0" .. marker .. "\0", 1, true) and st ~= "" and not st:match("%) Z ") then
        pids[#pids + 1] = pid
      end
    end
  end
  ls:close()
  return pids
end

local free_port = require("spec.support.util").free_port

-- Start the demo with no terminal (stdin /dev/null, its own session, as `make demo >log 2>&1 &`,
-- nohup or setsid would), through `make` when `via_make`; wait until it says it is running (the old
-- script stopped by itself there), check its jobs and processes, then SIGTERM the process it was
-- started as (make's, or the script's) and wait until no job and no process of it is left.
local function no_terminal(via_make)
  local root = util.root()
  local state = os.tmpname()
  os.remove(state)
  local conn = assert(slurm.connect { url = harness.URL, user = harness.USER, token = harness.TOKEN })
  local function demo_jobs(instance)
    local out = {}
    for _, j in ipairs(assert(conn:jobs())) do
      local t = tag.parse(j)
      if t and t.instance == instance and harness.LIVE[j.state.base] then out[#out + 1] = j.id end
    end
    return out
  end
  local instance
  finally(function()
    if instance then for _, id in ipairs(demo_jobs(instance)) do conn:cancel(id) end end
    for _, pid in ipairs(processes_with("OBLETH_DEMO_STATE=" .. state)) do util.sh("kill -KILL " .. pid) end
    util.sh("rm -rf " .. util.shq(state))
  end)
  util.sh("mkdir -p " .. util.shq(state))
  local out, pidfile = state .. "/out.log", state .. "/pid"
  -- make: neither the deps nor the build are redone (-o); what runs is `make demo`'s own recipe
  -- (make demo's release is SLURM, 22.05 unless given: the one this spec's cluster runs)
  local release = os.getenv("OBLETH_CLUSTER_RELEASE") or "22.05"
  local run = via_make and ("make -s -o build/.deps-all-ok -o all demo SLURM=" .. release) or "scripts/demo.sh"
  local cmd = ("cd %s && export OBLETH_DEMO_STATE=%s OBLETH_DEMO_PORT=%d && setsid sh -c %s </dev/null >%s 2>&1 &")
    :format(util.shq(root), util.shq(state), free_port(), util.shq("echo $$ >" .. util.shq(pidfile) .. "; exec " .. run),
      util.shq(out))
  local code, msg = util.sh(cmd)
  assert.equal(0, code, msg)
  util.wait_until(function()
    local text = util.slurp(out) or ""
    return text:find("demo: running", 1, true) or text:find("demo: stopped", 1, true), text:sub(-400)
  end, 300, "the demo to say it is running")
  local text = util.slurp(out)
  assert.is_nil(text:find("demo: stopped", 1, true), "the demo stopped by itself: " .. text:sub(-400))
  local pid = assert(tonumber((util.slurp(pidfile) or ""):match("%d+")), "no pid")
  instance = util.slurp(state .. "/instance"):match("%x+")
  assert.truthy(instance, "the demo wrote no installation id")
  assert.equal(2, #demo_jobs(instance), "the demo's two replicas hold jobs")
  assert.is_true(#processes_with("OBLETH_DEMO_STATE=" .. state) >= 3, "the demo, obleth serve and the provisioner run")

  util.sh("kill -TERM " .. pid)
  util.wait_until(function()
    local jobs, procs = demo_jobs(instance), processes_with("OBLETH_DEMO_STATE=" .. state)
    return #jobs == 0 and #procs == 0, ("jobs %s, processes %s"):format(table.concat(jobs, ","),
      table.concat(procs, ","))
  end, 60, "no demo job and no demo process (the script, serve, the provisioner)")
  util.wait_until(function()
    local t = util.slurp(out) or ""
    return t:find("demo: stopped", 1, true), t:sub(-400)
  end, 15, "the demo to say it stopped")
end

describe("make demo", function()
  it("started with no terminal, keeps running until SIGTERM to the script, then stops everything", function()
    no_terminal(false)
  end)

  it("stops everything (the script, its jobs, serve, the provisioner) on SIGTERM to the make process", function()
    no_terminal(true)
  end)

  it("stops its jobs and its obleth processes on SIGTERM sent to the script", function()
    assert.equal(0, (util.sh("command -v tmux")), "tmux is needed (scripts/deps.sh all installs it)")
    local root = util.root()
    local state = os.tmpname()
    os.remove(state)
    local sock = "obleth-demo-spec-" .. require("obleth.sys").getpid()
    local conn = assert(slurm.connect { url = harness.URL, user = harness.USER, token = harness.TOKEN })
    local function demo_jobs(instance)
      local out = {}
      for _, j in ipairs(assert(conn:jobs())) do
        local t = tag.parse(j)
        if t and t.instance == instance and harness.LIVE[j.state.base] then out[#out + 1] = j.id end
      end
      return out
    end
    local instance
    finally(function()
      util.sh("tmux -L " .. sock .. " kill-server")
      if instance then for _, id in ipairs(demo_jobs(instance)) do conn:cancel(id) end end
      for _, pid in ipairs(processes_with("OBLETH_DEMO_STATE=" .. state)) do util.sh("kill -KILL " .. pid) end
      util.sh("rm -rf " .. util.shq(state))
    end)

    local out = state .. "/out.log"
    util.sh("mkdir -p " .. util.shq(state))
    local cmd = ("cd %s && exec env OBLETH_DEMO_STATE=%s OBLETH_DEMO_PORT=%d scripts/demo.sh >%s 2>&1")
      :format(util.shq(root), util.shq(state), free_port(), util.shq(out))
    local code, msg = util.sh(("tmux -L %s new-session -d -x 160 -y 40 %s"):format(sock, util.shq(cmd)))
    assert.equal(0, code, msg)
    local _, pane = util.sh("tmux -L " .. sock .. " display-message -p -t 0 '#{pane_pid}'")
    local pid = assert(tonumber(pane:match("%d+")), "no pane pid: " .. pane)

    util.wait_until(function()
      local text = util.slurp(out) or ""
      return text:find("demo: running", 1, true), text:sub(-400)
    end, 300, "the demo to say it is running")
    instance = util.slurp(state .. "/instance"):match("%x+")
    assert.truthy(instance, "the demo wrote no installation id")
    assert.equal(2, #demo_jobs(instance), "the demo's two replicas hold jobs")
    assert.is_true(#processes_with("OBLETH_DEMO_STATE=" .. state) >= 2, "obleth serve and the provisioner run")

    util.sh("kill -TERM " .. pid)
    util.wait_until(function()
      local jobs, procs = demo_jobs(instance), processes_with("OBLETH_DEMO_STATE=" .. state)
      return #jobs == 0 and #procs == 0, ("jobs %s, processes %s"):format(table.concat(jobs, ","),
        table.concat(procs, ","))
    end, 120, "no demo job and no demo process")
    util.wait_until(function()
      local text = util.slurp(out) or ""
      return text:find("demo: stopped", 1, true), text:sub(-400)
    end, 15, "the demo to say it stopped")
  end)
end)
