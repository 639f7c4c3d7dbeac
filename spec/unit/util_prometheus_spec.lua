-- obleth.util.prometheus: the Prometheus text exposition format, worked out by hand.
local metrics = require "obleth.util.prometheus"

describe("metrics registry", function()
  it("renders counters with labels, sorted, with HELP and TYPE", function()
    local reg = metrics.new()
    local c = reg:counter("req_total", "Requests", { "model", "status" })
    c:inc({ "b", "200" })
    c:inc({ "a", "503" }, 2)
    c:inc({ "a", "503" })
    assert.equal(table.concat({
      "# HELP req_total Requests",
      "# TYPE req_total counter",
      'req_total{model="a",status="503"} 3',
      'req_total{model="b",status="200"} 1',
      "" }, "\n"), reg:render())
  end)

  it("renders a histogram with cumulative buckets, +Inf, sum and count", function()
    local reg = metrics.new()
    local h = reg:histogram("lat_seconds", "Latency", { "model" }, { 0.1, 1 })
    h:observe({ "m" }, 0.05)
    h:observe({ "m" }, 0.5)
    h:observe({ "m" }, 3)
    assert.equal(table.concat({
      "# HELP lat_seconds Latency",
      "# TYPE lat_seconds histogram",
      'lat_seconds_bucket{model="m",le="0.1"} 1',
      'lat_seconds_bucket{model="m",le="1"} 2',
      'lat_seconds_bucket{model="m",le="+Inf"} 3',
      'lat_seconds_sum{model="m"} 3.55',
      'lat_seconds_count{model="m"} 3',
      "" }, "\n"), reg:render())
  end)

  it("recomputes a collected gauge at every render, dropping series that went away", function()
    local reg = metrics.new()
    local rows = { { "a", 2 }, { "b", 1 } }
    reg:gauge("healthy", "Healthy", { "model" }, function(set)
      for _, r in ipairs(rows) do set({ r[1] }, r[2]) end
    end)
    assert.matches('healthy{model="b"} 1', reg:render(), 1, true)
    rows = { { "a", 0 } }
    local text = reg:render()
    assert.matches('healthy{model="a"} 0', text, 1, true)
    assert.not_matches('model="b"', text, 1, true)
  end)

  it("a gauge without labels, NaN, and add with negative numbers", function()
    local reg = metrics.new()
    local g = reg:gauge("inflight", "In flight", { "model" })
    g:add({ "m" }, 1); g:add({ "m" }, 1); g:add({ "m" }, -1)
    reg:gauge("age_seconds", "Age", nil, function(set) set({}, 0 / 0) end)
    local text = reg:render()
    assert.matches('inflight{model="m"} 1\n', text, 1, true)
    assert.matches("age_seconds NaN\n", text, 1, true)
  end)

  it("escapes backslash, quote and newline in label values", function()
    local reg = metrics.new()
    reg:counter("x_total", "X", { "model" }):inc({ 'a"b\\c\nd' })
    assert.matches('x_total{model="a\\"b\\\\c\\nd"} 1', reg:render(), 1, true)
  end)

  it("a collect function that fails leaves a comment, not a broken scrape", function()
    local reg = metrics.new()
    reg:gauge("g", "G", nil, function() error("database is locked") end)
    reg:counter("c_total", "C"):inc()
    local text = reg:render()
    assert.matches("# collect g failed: .*database is locked", text)
    assert.matches("c_total 1", text, 1, true)
  end)

  it("refuses misuse: a duplicate name, a bad name, the wrong number of label values", function()
    local reg = metrics.new()
    reg:counter("a_total", "A", { "model" })
    assert.has_error(function() reg:counter("a_total", "A") end)
    assert.has_error(function() reg:counter("bad name", "B") end)
    assert.has_error(function() reg._by_name.a_total:inc({ "m", "extra" }) end)
  end)
end)
