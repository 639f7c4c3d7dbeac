-- obleth.policy.failures: each failure class from Slurm's end and the job's own last lines, with the
-- line that shows it and whether it is the node's fault (docs/replicas-and-failures.md).
local failures = require "obleth.policy.failures"

describe("obleth.policy.failures.classify", function()
  local function class(f) local c = failures.classify(f) return c and c.class end

  it("exit 127 with bash's line is 'command not found', the engine's line quoted, not the node's fault", function()
    local c = failures.classify { state = "FAILED", reason = "NonZeroExitCode", exit_code = 127,
      stderr = { "some noise", "/var/spool/slurmd/job00042/slurm_script: line 4: vllm: command not found" } }
    assert.equal("command_not_found", c.class)
    assert.equal("command not found", c.title)
    assert.equal("/var/spool/slurmd/job00042/slurm_script: line 4: vllm: command not found", c.engine)
    assert.equal("FAILED NonZeroExitCode (exit code 127)", c.slurm)
    assert.is_false(c.node_fault)
    assert.equal("command-not-found", c.anchor)
  end)

  it("exit 127 with dash's 'exec: vllm: not found' quotes that line", function()
    local c = failures.classify { state = "FAILED", exit_code = 127, stderr = { "/tmp/s: 3: exec: vllm: not found" } }
    assert.equal("command_not_found", c.class)
    assert.equal("/tmp/s: 3: exec: vllm: not found", c.engine)
  end)

  it("exit 127 without a log is still 'command not found' (the exit code says it)", function()
    local c = failures.classify { state = "FAILED", exit_code = 127 }
    assert.equal("command_not_found", c.class)
    assert.is_nil(c.engine)
  end)

  it("exit 126 is 'not executable'", function()
    assert.equal("not_executable", class { state = "FAILED", exit_code = 126, stderr = { "x: Permission denied" } })
  end)

  it("exit 98, or 'Address already in use' in a traceback, is a port in use (before the traceback)", function()
    assert.equal("address_in_use", class { state = "FAILED", exit_code = 98 })
    local c = failures.classify { state = "FAILED", exit_code = 1, stderr = { "Traceback (most recent call last):",
      "  File \"x.py\", line 1", "OSError: [Errno 98] Address already in use" } }
    assert.equal("address_in_use", c.class)
    assert.equal("OSError: [Errno 98] Address already in use", c.engine)
    -- the job script's own check, before the engine starts
    assert.equal("address_in_use", class { state = "FAILED", exit_code = 1,
      stderr = { "obleth: port 20001 is already in use on n1: the replica cannot listen there; ending the job" } })
  end)

  it("CUDA out of memory wins over the traceback that carries it", function()
    local c = failures.classify { state = "FAILED", exit_code = 1, stderr = { "Traceback (most recent call last):",
      "  File \"w.py\", line 9, in load", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB" } }
    assert.equal("cuda_oom", c.class)
    assert.matches("CUDA out of memory", c.engine)
  end)

  it("OUT_OF_MEMORY, or FAILED with an OOM reason, is host OOM", function()
    assert.equal("host_oom", class { state = "OUT_OF_MEMORY", exit_code = 0 })
    assert.equal("host_oom", class { state = "FAILED", reason = "OutOfMemory", exit_code = 0 })
    assert.equal("host_oom", class { state = "FAILED", exit_code = 137,
      stderr = { "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=5.batch" } })
  end)

  it("TIMEOUT, NODE_FAIL / BOOT_FAIL and a refusal come from Slurm's state", function()
    assert.equal("timeout", class { state = "TIMEOUT" })
    local n = failures.classify { state = "NODE_FAIL", reason = "NodeDown" }
    assert.equal("node_failure", n.class)
    assert.is_true(n.node_fault)
    assert.equal("node_failure", class { state = "BOOT_FAIL" })
    local r = failures.classify { state = "REFUSED", reason = "Invalid partition name specified" }
    assert.equal("refused", r.class)
    assert.equal("REFUSED Invalid partition name specified", r.slurm)
  end)

  it("a Python traceback quotes its exception line", function()
    local c = failures.classify { state = "FAILED", exit_code = 1, stderr = { "INFO starting",
      "Traceback (most recent call last):", "  File \"/x/serve.py\", line 3, in <module>", "    main()",
      "ValueError: unknown model architecture Foo", "" } }
    assert.equal("python_traceback", c.class)
    assert.equal("ValueError: unknown model architecture Foo", c.engine)
    assert.is_false(c.node_fault)
  end)

  it("a normal or asked-for end is no failure; another non-zero exit is 'the engine exited'", function()
    assert.is_nil(failures.classify { state = "COMPLETED", exit_code = 0 })
    assert.is_nil(failures.classify { state = "CANCELLED", cancel_why = "restart asked" })
    assert.equal("exit", class { state = "FAILED", exit_code = 3, stderr = { "fatal: no weights" } })
    assert.equal("slow_start", class { state = "CANCELLED", cancel_why = "startup grace exceeded" })
  end)

  it("a job obleth cancelled on purpose is no failure, whatever its exit code; the health checks' cancels are", function()
    for _, why in ipairs { "scaled down", "restart asked", "drained", "model deleted", "paused", "slurm off",
      "rollover: successor healthy" } do
      assert.is_nil(failures.classify { state = "CANCELLED", exit_code = 143, cancel_why = why,
        stderr = { "INFO: Shutting down", "error: terminated" } }, why)
      assert.is_nil(failures.classify { state = "FAILED", exit_code = 143, cancel_why = why }, why)
      assert.is_true(failures.on_purpose { cancel_why = why })
    end
    assert.equal("slow_start", class { state = "CANCELLED", exit_code = 143, cancel_why = "startup grace exceeded" })
    assert.equal("unhealthy", class { state = "CANCELLED", exit_code = 143, cancel_why = "unhealthy past grace" })
    assert.equal("exit", class { state = "FAILED", exit_code = 143 })
    assert.is_false(failures.on_purpose {})
  end)

  it("an override can add a class before the built-in ones", function()
    local p = require("obleth.policy").new { dir = "/nonexistent" }
    local f = p.get("failures")
    local custom = f.new()
    table.insert(custom.CLASSES, 1, { class = "license", title = "no license", node_fault = false, anchor = "x", what = "y",
      test = function(_, log) return log[1] == "license expired", log[1] end })
    assert.equal("license", custom.classify({ state = "FAILED", exit_code = 127, stderr = { "license expired" } }).class)
    assert.equal("command_not_found", f.classify({ state = "FAILED", exit_code = 127 }).class)
  end)
end)
