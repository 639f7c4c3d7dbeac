-- obleth.job.script: the batch script of a spec without a script_body (docs/managed-spec.md):
-- module load, the preamble lines, then the launch command, inside Apptainer when an image is given.
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

  it("runs the launch command inside the image: exec apptainer exec --nv <image> <launch_command>", function()
    local script = job.script(spec { image = "/site/images/vllm 0.6.sif" }, { modules = { "cuda/12", "a b" } })
    assert.equal(table.concat({
      "#!/bin/bash",
      "# obleth replica: model $OBLETH_API_MODEL_NAME, replica $OBLETH_REPLICA_ID",
      "module load 'cuda/12' 'a b'",
      "ulimit -n 65536",
      wrapper("apptainer exec --nv '/site/images/vllm 0.6.sif' 'vllm' 'serve' '/m' --port \"${OBLETH_PORT}\""),
      "exec apptainer exec --nv '/site/images/vllm 0.6.sif' 'vllm' 'serve' '/m' --port \"${OBLETH_PORT}\"",
    }, "\n") .. "\n", script)
  end)

  it("runs the command directly when the image is blank or absent", function()
    for _, image in ipairs({ "", false }) do
      local script = job.script(spec { image = image or nil, preamble = {} }, {})
      assert.equal("#!/bin/bash\n# obleth replica: model $OBLETH_API_MODEL_NAME, replica $OBLETH_REPLICA_ID\n"
        .. wrapper("'vllm' 'serve' '/m' --port \"${OBLETH_PORT}\"") .. "\n"
        .. "exec 'vllm' 'serve' '/m' --port \"${OBLETH_PORT}\"\n", script)
    end
  end)

  it("runs a script_body as written, adding #!/bin/bash only when it has no #! line", function()
    assert.equal("#!/bin/sh\nexec x\n", job.script({ script_body = "#!/bin/sh\nexec x\n", image = "/i.sif" }, {}))
    assert.equal("#!/bin/bash\nexec x\n", job.script({ script_body = "exec x\n" }, {}))
  end)
end)
