--- obleth.util.prometheus — a small Prometheus registry: counters, gauges and histograms
-- with labels, rendered in the text exposition format (version 0.0.4).
--
--   local reg = metrics.new()
--   local req = reg:counter("obleth_router_requests_total", "Requests by model and status", {"model", "status"})
--   req:inc({"m", "200"})
--   local lat = reg:histogram("obleth_router_upstream_latency_seconds", "...", {"model"}, {0.01, 0.1, 1})
--   lat:observe({"m"}, 0.042)
--   reg:gauge("obleth_x", "...", {"model"}, function(set) set({"m"}, 3) end)  -- computed at scrape
--   reg:render() -> text
--
-- Label values are given positionally, in the order the labels were declared.
-- No module state: every registry is independent.
local M = {}

M.CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

--- Default buckets for latencies in seconds (LLM requests: milliseconds to minutes).
M.LATENCY_BUCKETS = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300 }

local function _esc(v)
  return (tostring(v):gsub("[\\\"\n]", { ["\\"] = "\\\\", ["\""] = "\\\"", ["\n"] = "\\n" }))
end

local function _num(v)
  if v ~= v then return "NaN" end
  if v == math.huge then return "+Inf" end
  if v == -math.huge then return "-Inf" end
  if math.type(v) == "integer" then return ("%d"):format(v) end
  if v == math.floor(v) and math.abs(v) < 2 ^ 53 then return ("%d"):format(math.tointeger(v)) end
  for _, f in ipairs({ "%.15g", "%.17g" }) do
    local t = f:format(v)
    if tonumber(t) == v then return t end
  end
  return ("%.17g"):format(v)
end

-- The label set as text: {a="x",b="y"} (empty string when there are no labels).
local function _labels(names, values, extra_name, extra_value)
  local parts = {}
  for i, n in ipairs(names) do parts[#parts + 1] = ('%s="%s"'):format(n, _esc(values[i] or "")) end
  if extra_name then parts[#parts + 1] = ('%s="%s"'):format(extra_name, _esc(extra_value)) end
  if #parts == 0 then return "" end
  return "{" .. table.concat(parts, ",") .. "}"
end

local function _key(values)
  if #values == 1 then return values[1] end
  return table.concat(values, "\0")
end

local function _check(names, values)
  if #values ~= #names then
    error(("metrics: %d label values for %d labels"):format(#values, #names), 3)
  end
end

local Registry = {}
Registry.__index = Registry

--- A new, empty registry.
function M.new()
  return setmetatable({ _list = {}, _by_name = {} }, Registry)
end

function Registry:_add(m)
  if type(m.name) ~= "string" or not m.name:match("^[a-zA-Z_:][a-zA-Z0-9_:]*$") then
    error("metrics: bad metric name " .. tostring(m.name), 3)
  end
  if self._by_name[m.name] then error("metrics: " .. m.name .. " is registered twice", 3) end
  m.labels = m.labels or {}
  m.series = {}
  self._by_name[m.name] = m
  self._list[#self._list + 1] = m
  return m
end

-- The series of metric m for these label values, created on first use by
-- fresh(m) (default: a value of 0), with its own copy of the label values.
local function _series(m, values, fresh)
  values = values or {}
  local k = _key(values)
  local s = m.series[k]
  if not s then
    _check(m.labels, values)
    s = fresh and fresh(m) or { v = 0 }
    s.values = { table.unpack(values) }
    m.series[k] = s
  end
  return s
end

local Counter = {}
Counter.__index = Counter

--- Add n (default 1) to the series with these label values.
function Counter:inc(values, n)
  local s = _series(self, values)
  s.v = s.v + (n or 1)
end

--- The current value of a series (0 when never incremented).
function Counter:get(values)
  local s = self.series[_key(values or {})]
  return s and s.v or 0
end

local Gauge = {}
Gauge.__index = Gauge

--- Set a series to v.
function Gauge:set(values, v)
  local s = _series(self, values)
  s.v = v
end

--- Add n (may be negative) to a series.
function Gauge:add(values, n)
  values = values or {}
  local s = self.series[_key(values)]
  self:set(values, (s and s.v or 0) + n)
end

Gauge.get = Counter.get

local Histogram = {}
Histogram.__index = Histogram

local function _empty_histogram(m)
  local counts = {}
  for i = 1, #m.buckets do counts[i] = 0 end
  return { counts = counts, sum = 0, count = 0 }
end

--- Record one observation v in the series with these label values.
function Histogram:observe(values, v)
  local s = _series(self, values, _empty_histogram)
  local b = self.buckets
  for i = 1, #b do
    if v <= b[i] then s.counts[i] = s.counts[i] + 1 break end
  end
  s.sum = s.sum + v
  s.count = s.count + 1
end

--- A counter: only goes up.
---@param name string
---@param help string
---@param labels string[]|nil
--- With collect(set), the counter's values are read at each render from where they are
--- kept (e.g. counts the host keeps in C), as with a collected gauge.
function Registry:counter(name, help, labels, collect)
  return setmetatable(self:_add { name = name, help = help, labels = labels, kind = "counter", collect = collect },
    Counter)
end

--- A gauge. With collect(set), the gauge is recomputed at each render: collect is called with
--- set(values, v) after the old series are dropped (e.g. values read from the store).
function Registry:gauge(name, help, labels, collect)
  return setmetatable(self:_add { name = name, help = help, labels = labels, kind = "gauge", collect = collect },
    Gauge)
end

--- A histogram with upper bounds `buckets` (ascending; +Inf is implied).
function Registry:histogram(name, help, labels, buckets)
  buckets = buckets or M.LATENCY_BUCKETS
  for i = 2, #buckets do
    if buckets[i] <= buckets[i - 1] then error("metrics: histogram buckets must ascend", 2) end
  end
  return setmetatable(self:_add { name = name, help = help, labels = labels, kind = "histogram",
    buckets = buckets }, Histogram)
end

local function _sorted_series(m)
  local keys = {}
  for k in pairs(m.series) do keys[#keys + 1] = k end
  table.sort(keys)
  return keys
end

--- The exposition text of every metric (series sorted by label values, so output is stable).
--- A collect function that raises leaves its gauge empty and is reported as a comment.
---@return string
function Registry:render()
  local out = {}
  for _, m in ipairs(self._list) do
    if m.collect then
      m.series = {}
      local ok, err = pcall(m.collect, function(values, v) _series(m, values).v = v end)
      if not ok then out[#out + 1] = ("# collect %s failed: %s"):format(m.name, (tostring(err):gsub("\n", " "))) end
    end
    out[#out + 1] = ("# HELP %s %s"):format(m.name, (m.help or ""):gsub("\\", "\\\\"):gsub("\n", "\\n"))
    out[#out + 1] = ("# TYPE %s %s"):format(m.name, m.kind)
    for _, k in ipairs(_sorted_series(m)) do
      local s = m.series[k]
      if m.kind == "histogram" then
        local cum = 0
        for i, ub in ipairs(m.buckets) do
          cum = cum + s.counts[i]
          out[#out + 1] = ("%s_bucket%s %s"):format(m.name, _labels(m.labels, s.values, "le", _num(ub)), _num(cum))
        end
        out[#out + 1] = ("%s_bucket%s %s"):format(m.name, _labels(m.labels, s.values, "le", "+Inf"), _num(s.count))
        local l = _labels(m.labels, s.values)
        out[#out + 1] = ("%s_sum%s %s"):format(m.name, l, _num(s.sum))
        out[#out + 1] = ("%s_count%s %s"):format(m.name, l, _num(s.count))
      else
        out[#out + 1] = ("%s%s %s"):format(m.name, _labels(m.labels, s.values), _num(s.v))
      end
    end
  end
  out[#out + 1] = ""
  return table.concat(out, "\n")
end

return M
