-- spec/cluster/down.sh runs as the last step of `make demo`'s cleanup. On `make demo | tee log`, Ctrl-C
-- ends tee as well, and the demo ignores SIGPIPE so its cleanup goes on; down.sh inherits that, and its
-- first message then fails with EPIPE. It must finish anyway (it once stopped under set -e before
-- stopping anything, leaving the whole harness up). Run on a copy of spec/cluster with no cluster
-- state, so the spec never touches a running harness.
local util = require "spec.support.util"

describe("spec/cluster/down.sh", function()
  it("finishes (exit 0) when SIGPIPE is ignored and its output pipe has no reader", function()
    local dir = os.tmpname()
    os.remove(dir)
    finally(function() util.sh("rm -rf " .. util.shq(dir)) end)
    local code, out = util.sh(("mkdir -p %s/spec && cp -r %s/spec/cluster %s/spec/"):format(util.shq(dir),
      util.shq(util.root()), util.shq(dir)))
    assert.equal(0, code, out)
    -- the reader closes its end before down.sh writes: every write of down.sh fails with EPIPE
    local cmd = ("cd %s && bash -c %s"):format(util.shq(dir), util.shq(
      "trap '' PIPE; spec/cluster/down.sh 2>&1 | (exec 0<&-; sleep 0.2); echo rc=${PIPESTATUS[0]}"))
    code, out = util.sh(cmd)
    assert.equal(0, code, out)
    assert.truthy(out:find("rc=0", 1, true), out)
  end)
end)
