-- luacheck: std lua54
-- The slurmrestd normalizer (obleth.slurm.normalize) on mutated answers: whatever comes
-- back from slurmrestd, every reader returns its shape for every API version and never
-- raises. An input that is JSON is read as an answer; any other input is a mutation script
-- over the recorded answers of $OBLETH_SHARED/cases/slurmrestd (default ../shared): byte 1
-- picks an answer, then each pair of bytes picks a table in it and puts an odd value under
-- one of its keys (null, a wrong type, a sentinel, an empty table, a hostlist, a GRES...).
local N = require "obleth.slurm.normalize"
local cjson = require("cjson").new()
cjson.decode_max_depth(64)

local VERSIONS = require("obleth.slurm.versions").known -- every version obleth knows
local LISTS = { "jobs", "db_jobs", "nodes", "partitions", "accounts", "associations", "qos", "errors", "warnings" }
local ODD = { cjson.null, "", "x", -1, 0, 4294967294, 4294967295, 18446744073709551614, 1e308, -1e308, 0.5,
  true, false, {}, { set = true, infinite = true }, { set = false }, { set = true, number = "7" }, { 1, 2 },
  { "IDLE", "DRAIN" }, "n[1-3],gpu[01-02]", "n[3-1]", "gpu:a100:4(IDX:0-3),gpu:2", "gres/gpu=2", "None",
  "UNLIMITED", "(null)", { status = { "SIGNALED" }, return_code = { set = true, number = 9 } } }

local answers = {}
do
  local shared = os.getenv("OBLETH_SHARED") or ((os.getenv("OBLETH_ROOT") or ".") .. "/../shared")
  local p = io.popen("find '" .. shared:gsub("'", "") .. "/cases/slurmrestd' -name '*.json' -size -64k 2>/dev/null | sort")
  for path in p:lines() do
    local fh = io.open(path, "rb")
    local ok, doc = pcall(cjson.decode, fh:read("a"))
    fh:close()
    if ok and type(doc) == "table" then answers[#answers + 1] = doc end
  end
  p:close()
end

local function copy(v)
  if type(v) ~= "table" then return v end
  local o = {}
  for k, x in pairs(v) do o[k] = copy(x) end
  return o
end

local function tables_of(v, out)
  out[#out + 1] = v
  for _, x in pairs(v) do if type(x) == "table" then tables_of(x, out) end end
  return out
end

local function keys_of(t)
  local ks = {}
  for k in pairs(t) do ks[#ks + 1] = k end
  table.sort(ks, function(a, b) return tostring(a) < tostring(b) end)
  return ks
end

local function run(doc, v)
  for _, f in ipairs(LISTS) do assert(type(N[f](doc, v)) == "table", f) end
  N.job(doc, v)
  N.db_job(doc, v)
  N.ping(doc, v)
  N.diag(doc, v)
  N.submit_response(doc, v, 200)
  assert(type(N.cancel_failures(doc)) == "table", "cancel_failures")
  N.mark_listed(N.partitions(doc, v), N.partitions(doc, v))
end

return function(data)
  local v = VERSIONS[#data % #VERSIONS + 1]
  local c = data:sub(1, 1)
  if c == "{" or c == "[" then
    local ok, doc = pcall(cjson.decode, data)
    if ok then run(doc, v) end
    return
  end
  if #answers == 0 or #data < 1 then return end
  local doc = copy(answers[data:byte(1) % #answers + 1])
  local all = tables_of(doc, {})
  for i = 2, #data - 1, 2 do
    local t = all[data:byte(i) % #all + 1]
    local ks = keys_of(t)
    if #ks > 0 then
      local k = ks[data:byte(i + 1) % #ks + 1]
      t[k] = copy(ODD[data:byte(i + 1) % #ODD + 1])
    end
  end
  run(doc, v)
end
