-- Where an input's text may stand (obleth.recipe.contexts, docs/recipes.md "Injection safety"):
-- the bad-input review's canaries, each RENDERED and RUN under bash when the recipe is accepted,
-- and each refused when the recipe is checked, naming the line. Every one of them created its
-- canary before the allowlist.
local recipe = require "obleth.recipe"
local shell = require "obleth.util.shell"

local function sh(cmd) return os.execute(cmd) == true end

local function exists(path) return sh("test -e " .. shell.quote(path)) end

local function write(path, text)
  local fh = assert(io.open(path, "wb"))
  fh:write(text)
  fh:close()
end

describe("recipe inputs reach a job only as data (the review's canaries)", function()
  local dir, canary

  before_each(function()
    dir = os.tmpname()
    os.remove(dir)
    assert(sh("mkdir -p " .. shell.quote(dir)))
    canary = dir .. "/canary"
  end)

  after_each(function() sh("rm -rf " .. shell.quote(dir)) end)

  -- Render the recipe with x = value and run the job the way a batch step would: the rendered
  -- script (or preamble + launch command) under bash, with the rendered environment.
  local function run(r, value)
    local out, err = recipe.render(r, { x = value }, {}, { api_name = "m" })
    if not out then return false, err end
    local body = out.script_body or ("#!/bin/bash\n" .. table.concat(out.preamble, "\n") .. "\n"
      .. out.launch_command .. "\n")
    write(dir .. "/job.sh", body)
    local envs = { "OBLETH_PORT=20001" }
    for k, v in pairs(out.environment) do envs[#envs + 1] = k .. "=" .. shell.quote(v) end
    sh(("cd %s && env %s bash job.sh >/dev/null 2>&1 </dev/null"):format(shell.quote(dir), table.concat(envs, " ")))
    return true
  end

  local cases = {
    { "an environment: entry the script evaluates in $((...))",
      { environment = { OFFSET = "{{ inputs.x }}" }, script = "#!/bin/bash\necho $((OBLETH_PORT + OFFSET))\n" },
      function(c) return "a[$(touch " .. c .. ")]" end, "script",
      "^line 2: OFFSET carries an input's text into arithmetic" },
    { "launch: [bash, -c, value]", { launch = { "bash", "-c", "{{ inputs.x }}" } },
      function(c) return "touch " .. c end, "launch[1]", "reaches bash" },
    { "echo value | sh", { script = "#!/bin/bash\necho {{ inputs.x }} | sh\n" },
      function(c) return "touch " .. c end, "script", "^line 2: .*pipe" },
    { "perl -e value", { script = "#!/bin/bash\nperl -e {{ inputs.x }}\n" },
      function(c) return "open(F, '>', '" .. c .. "')" end, "script", "^line 2: .*perl" },
    -- the same places, reached through a variable that carries the value
    { "a variable holding the value in bash -c", { script = "#!/bin/bash\nM={{ inputs.x }}\nbash -c \"$M\"\n" },
      function(c) return "touch " .. c end, "script", "^line 3: %$M" },
    { "a variable holding the value, unquoted", { script = "#!/bin/bash\nM={{ inputs.x }}\nls $M >/dev/null\n" },
      function(c) return "$(touch " .. c .. ")" end, "script", '^line 3: %$M .*unquoted: write "%$M"' },
    { "a variable holding the value in eval", { script = "#!/bin/bash\nM={{ inputs.x }}\neval \"$M\"\n" },
      function(c) return "touch " .. c end, "script", "^line 3: %$M" },
    { "a variable holding the value in [[ -gt ]]", { script = "#!/bin/bash\nM={{ inputs.x }}\n[[ \"$M\" -gt 1 ]]\n" },
      function(c) return "a[$(touch " .. c .. ")]" end, "script", "^line 3: .*%[%[ %]%]" },
    { "an environment: entry given to bash -c in a launch list",
      { environment = { CODE = "{{ inputs.x }}" }, launch = { "bash", "-c", "$CODE" } },
      function(c) return "touch " .. c end, "launch[1]", "reaches bash" },
    { "a preamble line with perl -E", { preamble = { "perl -E {{ inputs.x }}" }, launch = { "vllm", "serve" } },
      function(c) return "open(F, '>', '" .. c .. "')" end, "preamble[1]",
      "^preamble%[1%]: an input's text is an argument of perl" },
    { "a heredoc fed to python", { script = "#!/bin/bash\nM={{ inputs.x }}\npython3 - <<EOF\n$M\nEOF\n" },
      function(c) return "open('" .. c .. "', 'w')" end, "script", "^line 4: .*heredoc" },
    { "a here-string fed to sh", { script = "#!/bin/bash\nsh <<< {{ inputs.x }}\n" },
      function(c) return "touch " .. c end, "script", "^line 2: " },
    { "a variable as the program", { script = "#!/bin/bash\nM={{ inputs.x }}\n\"$M\" -c 'touch x'\n" },
      function() return "bash" end, "script", "^line 3: .*program" },
    -- found by trying to break the allowlist
    { "a variable named by printf -v", { script = "#!/bin/bash\nM={{ inputs.x }}\nprintf -v \"$M\" '%s' 1\n" },
      function(c) return "a[$(touch " .. c .. ")]" end, "script", "^line 3: .*printf %-v" },
    { "a variable named by [ -v ]", { script = "#!/bin/bash\nM={{ inputs.x }}\n[ -v \"$M\" ]\n" },
      function(c) return "a[$(touch " .. c .. ")]" end, "script", "^line 3: .*%-v" },
    { "a variable expanded later by eval '...'", { script = "#!/bin/bash\nM={{ inputs.x }}\neval 'bash -c \"$M\"'\n" },
      function(c) return "touch " .. c end, "script", "^line 3: in the shell code given to eval: %$M .* bash" },
    { "an exported variable run by bash -c '...'",
      { script = "#!/bin/bash\nexport M={{ inputs.x }}\nbash -c 'eval \"$M\"'\n" },
      function(c) return "touch " .. c end, "script", "^line 3: in the shell code given to bash: %$M .* eval" },
    { "a quoted heredoc fed to bash",
      { script = "#!/bin/bash\nexport M={{ inputs.x }}\nbash <<'EOF'\neval \"$M\"\nEOF\n" },
      function(c) return "touch " .. c end, "script", "^line 4: %$M .*heredoc" },
    { "a modulefile path for module load",
      { script = "#!/bin/bash\nmodule() { bash \"$2\"; }\nM={{ inputs.x }}\nmodule load \"$M\"\n" },
      function(c) local f = c .. ".sh"; return f end, "script", "^line 4: .*module" },
    { "obleth lua FILE", { launch = { "obleth", "lua", "{{ inputs.x }}" } },
      function(c) return c .. ".lua" end, "launch[1]", "obleth smoke%-engine" },
    { "an srun option that runs a program",
      { script = "#!/bin/bash\nM={{ inputs.x }}\nsrun --prolog=\"$M\" vllm serve m\n" },
      function(c) return "touch " .. c end, "script", "^line 3: .*srun" },
  }

  for _, c in ipairs(cases) do
    it(("refuses %s when the recipe is checked, naming the line, and the value never runs"):format(c[1]), function()
      local tbl = { id = "t", engine = "custom", inputs = { x = { type = "string" } } }
      for k, v in pairs(c[2]) do tbl[k] = v end
      local r, errs = recipe.validate(tbl)
      if r then
        run(r, c[3](canary))
        assert.is_false(exists(canary), "the value ran as code: " .. c[1])
      end
      assert.is_nil(r, "accepted: " .. c[1])
      assert.equal(c[4], errs.errors[1].field)
      assert.matches(c[5], errs.errors[1].message)
    end)
  end

  it("a recipe's programs: may not name a shell or an interpreter", function()
    local r, errs = recipe.validate({ id = "t", engine = "custom", inputs = { x = { type = "string" } },
      programs = { "engine", "perl" }, launch = { "perl", "-e", "{{ inputs.x }}" } })
    assert.is_nil(r)
    local msgs = {}
    for _, e in ipairs(errs.errors) do msgs[e.field] = e.message end
    assert.matches("perl runs its arguments as code", msgs["programs[2]"])
  end)

  -- the allowed places run a hostile value as one literal argument
  local allowed = {
    { "a reference as an argument of a data program", { script = "#!/bin/bash\nexec echo {{ inputs.x }} >out\n" } },
    { "a variable used double-quoted",
      { script = "#!/bin/bash\nM={{ inputs.x }}\nif [ -n \"$M\" ]; then printf '%s\\n' \"$M\" >out; fi\n" } },
    { "an environment: entry used double-quoted", { environment = { V = "{{ inputs.x }}" },
      script = "#!/bin/bash\nmkdir -p \"$V.d\" && echo \"$V\" >out\n" } },
    { "a variable carried on by another assignment",
      { script = "#!/bin/bash\nexport A={{ inputs.x }}\nB=\"$A\"\necho \"$B\" >out\n" } },
    -- shell code given as a literal is checked as a script of its own: an exported variable is data there too
    { "an exported variable used double-quoted in bash -c '...'",
      { script = "#!/bin/bash\nexport V={{ inputs.x }}\nbash -c 'if [ -n \"$V\" ]; then printf \"%s\\n\" \"$V\" >out; fi'\n" } },
    { "a launch list of a program named in programs:", { programs = { "echo-engine" },
      launch = { "echo-engine", "{{ inputs.x }}" } } },
  }
  for _, c in ipairs(allowed) do
    it(("accepts %s, and a hostile value arrives as data"):format(c[1]), function()
      local tbl = { id = "t", engine = "custom", inputs = { x = { type = "string" } } }
      for k, v in pairs(c[2]) do tbl[k] = v end
      local r, errs = recipe.validate(tbl)
      assert.is_table(r, errs and errs.message)
      write(dir .. "/echo-engine", "#!/bin/sh\nprintf '%s\\n' \"$1\" >out\n")
      sh("chmod 755 " .. shell.quote(dir .. "/echo-engine"))
      local value = "x;touch " .. canary .. " `touch " .. canary .. "` $(touch " .. canary .. ")"
      -- the program named in programs: runs from the job's directory
      local body_r = r
      if c[2].launch then body_r.launch[1] = "./echo-engine" end
      assert(run(body_r, value))
      assert.is_false(exists(canary))
      local fh = assert(io.open(dir .. "/out", "rb"), "the job wrote nothing")
      assert.equal(value .. "\n", fh:read("a"))
      fh:close()
    end)
  end
end)

describe("number and integer inputs are finite", function()
  it("1e400 is a field error naming the input, from the form and from a recipe's default", function()
    local r = assert(recipe.validate({ id = "t", engine = "custom", programs = { "e" },
      inputs = { x = { type = "number" }, n = { type = "integer" } }, launch = { "e", "{{ inputs.x }}" } }))
    for _, name in ipairs({ "x", "n" }) do
      for _, v in ipairs({ "1e400", "-1e400", 1 / 0 }) do
        local res = recipe.resolve(r, { inputs = { [name] = v } }, {}, nil)
        assert.equal(1, #res.errors, tostring(v))
        assert.equal("inputs." .. name, res.errors[1].field)
        assert.matches("inputs%." .. name .. " must be a", res.errors[1].message)
      end
    end
    local _, errs = recipe.validate({ id = "t", engine = "custom", inputs = { x = { type = "number", default = 1 / 0 } },
      launch = { "e" } })
    assert.equal("inputs.x.default", errs.errors[1].field)
    assert.matches("finite", errs.errors[1].message)
    assert.equal(2.5, recipe.check_input({ type = "number" }, "2.5"))
    -- and whatever way a value gets past the form, it never renders as 'inf' (the preview renders
    -- the script while it shows the field errors)
    for _, v in ipairs({ 1 / 0, -1 / 0, 0 / 0 }) do
      local out, rerr = recipe.render(r, { x = v }, {}, {})
      assert.is_nil(out)
      assert.equal("inputs.x", rerr.errors[1].field)
      assert.matches("finite", rerr.errors[1].message)
    end
  end)
end)
