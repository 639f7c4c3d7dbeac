-- deploy/helm/obleth with a real Helm: lint --strict passes, and the
-- rendered manifests say what the chart promises: no provisioner unless enabled; then exactly
-- one replica with the Recreate strategy, no PodDisruptionBudget, the admin token from the named
-- secret (never a literal); a values file asking for two provisioner replicas is refused.
-- Run by scripts/helm-check.sh (make helm-check), which provides OBLETH_HELM.
local yaml = require "obleth.yaml"
local util = require "spec.support.util"

local HELM = os.getenv("OBLETH_HELM")

describe("the Helm chart deploy/helm/obleth", function()
  if not HELM then
    it("needs helm", function() pending("run through make helm-check (OBLETH_HELM unset)") end)
    return
  end
  local chart = util.root() .. "/deploy/helm/obleth"
  local tmp = {}

  local function values_file(text)
    local p = util.tmpfile(text, ".yaml")
    tmp[#tmp + 1] = p
    return p
  end
  teardown(function() for _, p in ipairs(tmp) do os.remove(p) end end)

  local function helm(args)
    return util.sh(util.shq(HELM) .. " " .. args)
  end

  -- the objects `helm template` renders with these values (a YAML text)
  local function render(values)
    local args = "template rel " .. util.shq(chart) .. " --namespace ns"
    if values then args = args .. " -f " .. util.shq(values_file(values)) end
    local code, out = helm(args)
    assert.equal(0, code, out)
    -- one YAML document per object, separated by "---" lines
    local docs, cur = {}, {}
    for line in (out .. "\n"):gmatch("(.-)\n") do
      if line:match("^%-%-%-") then
        docs[#docs + 1], cur = table.concat(cur, "\n") .. "\n", {}
      else
        cur[#cur + 1] = line
      end
    end
    docs[#docs + 1] = table.concat(cur, "\n") .. "\n"
    local objs = {}
    for _, doc in ipairs(docs) do
      local v = assert(yaml.decode(doc))
      if type(v) == "table" and v.kind then objs[#objs + 1] = v end
    end
    return objs, out
  end

  local function find(objs, kind, component)
    local out = {}
    for _, o in ipairs(objs) do
      local labels = o.metadata.labels or {}
      if o.kind == kind and (component == nil or labels["app.kubernetes.io/component"] == component) then
        out[#out + 1] = o
      end
    end
    return out
  end

  local function env_of(container)
    local e = {}
    for _, x in ipairs(container.env or {}) do e[x.name] = x.value end
    return e
  end

  it("passes helm lint --strict, with the provisioner off and on", function()
    local code, out = helm("lint --strict " .. util.shq(chart))
    assert.equal(0, code, out)
    code, out = helm("lint --strict " .. util.shq(chart) .. " --set provisioner.enabled=true")
    assert.equal(0, code, out)
  end)

  it("without provisioner.enabled renders the server only: one replica, Recreate, probes, a volume", function()
    local objs = render(nil)
    assert.equal(0, #find(objs, "Deployment", "provisioner"))
    assert.equal(0, #find(objs, "ConfigMap", "provisioner"))
    local server = find(objs, "Deployment", "server")
    assert.equal(1, #server)
    local spec = server[1].spec
    assert.equal(1, spec.replicas)
    assert.equal("Recreate", spec.strategy.type)
    local c = spec.template.spec.containers[1]
    assert.same({ "serve" }, c.args)
    assert.equal("/healthz", c.readinessProbe.httpGet.path)
    assert.equal("/metrics", c.livenessProbe.httpGet.path)
    assert.equal("/run/secrets/obleth/admin-token", env_of(c).OBLETH_ADMIN_TOKEN_FILE)
    assert.is_nil(env_of(c).OBLETH_ADMIN_TOKEN)
    -- the connection limits: the descriptor limit serve raises itself to (a pod spec
    -- has no ulimits), the header and idle deadlines; the cap is serve's default unless set
    assert.equal("65536", env_of(c).OBLETH_NOFILE)
    assert.equal("10", env_of(c).OBLETH_HEADER_TIMEOUT)
    assert.equal("5", env_of(c).OBLETH_IDLE_TIMEOUT)
    assert.is_nil(env_of(c).OBLETH_MAX_CONNECTIONS)
    assert.equal(1, #find(objs, "PersistentVolumeClaim"))
    assert.equal(1, #find(objs, "Service"))
    -- no existing secret named: the chart makes one with a random token
    local secrets = find(objs, "Secret")
    assert.equal(1, #secrets)
    assert.equal("rel-obleth-admin", secrets[1].metadata.name)
    assert.is_true(#secrets[1].data["admin-token"] >= 48)
    assert.equal(10001, spec.template.spec.securityContext.runAsUser)
    assert.is_true(spec.template.spec.securityContext.runAsNonRoot)
  end)

  it("with provisioner.enabled: one replica, Recreate, no PodDisruptionBudget, the token from the named secret",
    function()
      local objs = render("provisioner:\n  enabled: true\nadminToken:\n  existingSecret: site-admin\n"
        .. "  existingSecretKey: token\n")
      local prov = find(objs, "Deployment", "provisioner")
      assert.equal(1, #prov)
      local spec = prov[1].spec
      assert.equal(1, spec.replicas)
      assert.equal("Recreate", spec.strategy.type)
      assert.equal(0, #find(objs, "PodDisruptionBudget"))
      assert.equal(0, #find(objs, "HorizontalPodAutoscaler"))
      -- the named secret, no chart-made one
      assert.equal(0, #find(objs, "Secret"))
      local vols = {}
      for _, v in ipairs(spec.template.spec.volumes) do vols[v.name] = v end
      assert.equal("site-admin", vols["admin-token"].secret.secretName)
      assert.same({ { key = "token", path = "admin-token" } }, vols["admin-token"].secret.items)
      local c = spec.template.spec.containers[1]
      assert.same({ "provisioner" }, c.args)
      local env = env_of(c)
      assert.equal("http://rel-obleth:8080", env.OBLETH_ADMIN_BASE_URL)
      assert.equal("/run/secrets/obleth/admin-token", env.OBLETH_ADMIN_TOKEN_FILE)
      assert.is_nil(env.OBLETH_ADMIN_TOKEN)
      assert.equal("rel-obleth-provisioner", env.OBLETH_PROVISIONER_NAME)
      -- the server reads the same secret
      local server = find(objs, "Deployment", "server")[1].spec.template.spec
      for _, v in ipairs(server.volumes) do
        if v.name == "admin-token" then assert.equal("site-admin", v.secret.secretName) end
      end
    end)

  it("mounts policy overrides and the site's JWT key when given", function()
    local objs = render("provisioner:\n  enabled: true\n  policy:\n    lost.lua: |\n      return {}\n"
      .. "  jwtKey:\n    existingSecret: slurm-jwt\n")
    local cm = find(objs, "ConfigMap", "policy")
    assert.equal(1, #cm)
    assert.equal("return {}\n", cm[1].data["lost.lua"])
    local mounts = {}
    for _, m in ipairs(find(objs, "Deployment", "provisioner")[1].spec.template.spec.containers[1].volumeMounts) do
      mounts[m.name] = m.mountPath
    end
    assert.equal("/etc/obleth/policy.d", mounts.policy)
    -- the same ConfigMap reaches obleth serve, which runs learned, suggestions, partition_fit and validate
    local server = find(objs, "Deployment", "server")[1].spec.template.spec
    local smounts, svols = {}, {}
    for _, m in ipairs(server.containers[1].volumeMounts) do smounts[m.name] = m.mountPath end
    for _, v in ipairs(server.volumes) do svols[v.name] = v end
    assert.equal("/etc/obleth/policy.d", smounts.policy)
    assert.equal(cm[1].metadata.name, svols.policy.configMap.name)
    assert.equal("/etc/obleth/jwt", mounts["jwt-key"])
    -- the key as token_key_file wants it: copied by the pod's own user into a memory volume, mode 0400
    -- (a Secret's files belong to root)
    local pod = find(objs, "Deployment", "provisioner")[1].spec.template.spec
    local init = pod.initContainers[1]
    assert.equal("jwt-key", init.name)
    assert.matches("chmod 0400 /etc/obleth/jwt/jwt_hs256.key", init.command[3], 1, true)
    local vols = {}
    for _, v in ipairs(pod.volumes) do vols[v.name] = v end
    assert.equal("Memory", vols["jwt-key"].emptyDir.medium)
    assert.equal("slurm-jwt", vols["jwt-key-secret"].secret.secretName)
  end)

  it("refuses a values file asking for two provisioner replicas, naming the value", function()
    local f = values_file("provisioner:\n  enabled: true\n  replicas: 2\n")
    local code, out = helm("template rel " .. util.shq(chart) .. " -f " .. util.shq(f))
    assert.not_equal(0, code)
    assert.matches("provisioner/replicas", out, 1, true)
    code, out = helm("lint --strict " .. util.shq(chart) .. " -f " .. util.shq(f))
    assert.not_equal(0, code, out)
    -- nor under another name
    code = helm("template rel " .. util.shq(chart) .. " --set provisioner.replicaCount=2")
    assert.not_equal(0, code)
  end)

  it("renders obleth serve with 3 replicas on PostgreSQL: the URL from its Secret, no volume, a disruption budget",
    function()
    local objs = render("server:\n  replicas: 3\ndatabase:\n  existingSecret: obleth-db\n")
    local dep = find(objs, "Deployment", "server")[1]
    assert.equal(3, dep.spec.replicas)
    assert.equal("RollingUpdate", dep.spec.strategy.type)
    local c = dep.spec.template.spec.containers[1]
    local url
    for _, x in ipairs(c.env) do if x.name == "OBLETH_DATABASE_URL" then url = x.valueFrom.secretKeyRef end end
    assert.same({ name = "obleth-db", key = "database-url" }, url)
    assert.is_nil(env_of(c).OBLETH_DB)
    assert.equal(0, #find(objs, "PersistentVolumeClaim"))
    for _, v in ipairs(dep.spec.template.spec.volumes) do
      if v.name == "data" then assert.is_nil(v.persistentVolumeClaim) end
    end
    local pdb = find(objs, "PodDisruptionBudget", "server")
    assert.equal(1, #pdb)
    assert.equal(1, pdb[1].spec.minAvailable)
    assert.same(dep.spec.selector.matchLabels, pdb[1].spec.selector.matchLabels)
    assert.is_truthy(c.readinessProbe)
    local code = helm("lint --strict " .. util.shq(chart) .. " --set server.replicas=3 --set database.existingSecret=obleth-db")
    assert.equal(0, code)
  end)

  it("refuses two obleth serve on SQLite, and keeps one replica with its volume by default", function()
    local f = values_file("server:\n  replicas: 2\n")
    local code, out = helm("template rel " .. util.shq(chart) .. " -f " .. util.shq(f))
    assert.not_equal(0, code)
    assert.matches("existingSecret", out, 1, true)
    code = helm("lint --strict " .. util.shq(chart) .. " -f " .. util.shq(f))
    assert.not_equal(0, code)
    local objs = render()
    local dep = find(objs, "Deployment", "server")[1]
    assert.equal(1, dep.spec.replicas)
    assert.equal("Recreate", dep.spec.strategy.type)
    assert.equal("/var/lib/obleth/obleth.db", env_of(dep.spec.template.spec.containers[1]).OBLETH_DB)
    assert.equal(1, #find(objs, "PersistentVolumeClaim"))
    assert.equal(0, #find(objs, "PodDisruptionBudget"))
  end)
end)
