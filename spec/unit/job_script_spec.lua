-- obleth.job.script: the batch script of a spec (docs/managed-spec.md): the #! line, the prologue
-- (port check, Apptainer binds, the site's module system and Cluster defaults' modules, loaded once),
-- then the preamble lines and the launch command, inside Apptainer when an image is given; or a
-- script_body after the prologue.
local job = require "obleth.job"

describe("obleth.job.script", function()
  -- the lines that report the job's last words when the provisioner gave it a report URL (job.REPORT_LINES)
  local function wrapper(cmd)
    local out = {}
    for i, l in ipairs(job.REPORT_LINES) do out[i] = (l:gsub("@CMD@", function() return cmd end)) end
    assert.equal("  " .. cmd .. " &", out[2])
    return table.concat(out, "\n")
  end
  local function spec(over)
    local s = { launch_command = "'vllm' 'serve' '/m' --port \"${OBLETH_PORT}\"", preamble = { "ulimit -n 65536" } }
    for k, v in pairs(over or {}) do s[k] = v end
    return s
  end
  local function lines(s)
    local out = {}
    for l in s:gmatch("[^\n]*") do out[#out + 1] = l end
    return out
  end
  local function count(s, pat)
    local n = 0
    for _ in s:gmatch(pat) do n = n + 1 end
    return n
  end

  it("runs the launch command inside the image: exec apptainer exec --nv with the binds <image> <launch_command>", function()
    local script = job.script(spec { image = "/site/images/vllm 0.6.sif" }, { modules = { "cuda/12", "a b" } })
    local l = lines(script)
    assert.equal("#!/bin/bash", l[1])
    assert.equal("# obleth replica: model $OBLETH_API_MODEL_NAME, replica $OBLETH_REPLICA_ID", l[2])
    local cmd = "apptainer exec --nv ${OBLETH_BINDS:+--bind \"$OBLETH_BINDS\"} '/site/images/vllm 0.6.sif' 'vllm' "
      .. "'serve' '/m' --port \"${OBLETH_PORT}\""
    local tail = "\nulimit -n 65536\n" .. wrapper(cmd) .. "\nexec " .. cmd .. "\n"
    assert.equal(tail, script:sub(-#tail))
    -- each module once, after the module system is initialised
    assert.equal(1, count(script, "\nmodule load 'cuda/12' 'a b' ||"))
    assert.is_truthy(script:find('. "$obleth_f"', 1, true))
    assert.is_truthy(script:find("/etc/profile.d/lmod.sh", 1, true))
    assert.is_truthy(script:find("/usr/share/modules/init/bash", 1, true))
  end)

  it("runs the command directly when the image is blank or absent, with no module lines without modules", function()
    for _, image in ipairs({ "", false }) do
      local script = job.script(spec { image = image or nil, preamble = {} }, {})
      local cmd = "'vllm' 'serve' '/m' --port \"${OBLETH_PORT}\""
      local tail = "\n" .. wrapper(cmd) .. "\nexec " .. cmd .. "\n"
      assert.equal(tail, script:sub(-#tail))
      assert.is_nil(script:find("module", 1, true))
    end
  end)

  it("puts the prologue after a script_body's #! line, adding #!/bin/bash only when it has no #! line", function()
    local s = job.script({ script_body = "#!/bin/sh\nexec x\n", image = "/i.sif" }, {})
    assert.equal("#!/bin/sh\n", s:sub(1, 10))
    assert.matches("\nexec x\n$", s)
    assert.is_truthy(s:find("obleth_port_busy", 1, true))
    s = job.script({ script_body = "exec x\n" }, {})
    assert.equal("#!/bin/bash\n", s:sub(1, 12))
    assert.matches("\nexec x\n$", s)
  end)

  local function run(script, env)
    local path = os.tmpname()
    local fh = assert(io.open(path, "w"))
    fh:write(script)
    fh:close()
    local assigns = {}
    for k, v in pairs(env or {}) do assigns[#assigns + 1] = k .. "='" .. v .. "'" end
    local p = io.popen(("env -i PATH=/usr/bin:/bin %s bash %s 2>&1; echo \"rc=$?\""):format(table.concat(assigns, " "), path))
    local out = p:read("a")
    p:close()
    os.remove(path)
    return out
  end

  it("ends the job with a clear message when the replica's port is already listened on", function()
    local srv = io.popen("exec /usr/bin/python3 -c 'import os,socket,time; s=socket.socket(); s.bind((\"0.0.0.0\", 0)); "
      .. "s.listen(1); print(os.getpid(), s.getsockname()[1], flush=True); time.sleep(60)'", "r")
    local pid, port = srv:read("l"):match("^(%d+) (%d+)$")
    local out = run(job.script({ launch_command = "echo engine started" }, {}), { OBLETH_PORT = port })
    os.execute("kill " .. pid)
    srv:close()
    assert.matches("obleth: port " .. port .. " is already in use on ", out, 1, true)
    assert.matches("rc=1\n$", out)
    assert.is_nil(out:find("engine started", 1, true))
    -- a free port: the engine starts
    out = run(job.script({ launch_command = "echo engine started" }, {}), { OBLETH_PORT = port })
    assert.matches("engine started\nrc=0\n$", out)
  end)

  it("says clearly when modules are named but the node has no module system", function()
    local inits = job.MODULE_INITS
    job.MODULE_INITS = { "/nonexistent/init/bash" } -- a node without Lmod or Environment Modules
    local ok, script = pcall(job.script, { launch_command = "echo engine started" }, { modules = { "cuda/12" } })
    job.MODULE_INITS = inits
    assert(ok, script)
    local out = run(script, { OBLETH_PORT = "1" })
    assert.matches("Cluster defaults name modules ('cuda/12') but no module system was found", out, 1, true)
    assert.matches("rc=1\n$", out)
  end)

  it("initialises Lmod in the batch script and loads each module once, keeping the job's PATH", function()
    if not io.open("/usr/share/lmod/lmod/init/bash") then
      pending("Lmod is not installed (scripts/deps.sh all installs it)")
      return
    end
    local dir = os.tmpname()
    os.remove(dir)
    os.execute("mkdir -p " .. dir .. "/mods/t")
    local fh = assert(io.open(dir .. "/mods/t/1.lua", "w"))
    fh:write('prepend_path("PATH", "' .. dir .. '/bin")\nsetenv("OBLETH_T_LOADS", (os.getenv("OBLETH_T_LOADS") or "") .. "x")\n')
    fh:close()
    local out = run(job.script({ launch_command = "sh -c 'echo \"PATH=$PATH LOADS=$OBLETH_T_LOADS\"'" },
      { modules = { "t/1" } }), { OBLETH_PORT = "1", MODULEPATH = dir .. "/mods" })
    os.execute("rm -rf " .. dir)
    assert.matches("PATH=" .. dir:gsub("%p", "%%%0") .. "/bin:/usr/bin:/bin LOADS=x\nrc=0\n$", out)
  end)
end)
