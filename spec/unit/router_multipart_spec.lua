local router = require "obleth.router"

local function form(parts, b)
  local out = {}
  for _, p in ipairs(parts) do
    out[#out + 1] = "--" .. b .. "\r\n" .. p[1] .. "\r\n\r\n" .. p[2] .. "\r\n"
  end
  return table.concat(out) .. "--" .. b .. "--\r\n"
end

describe("router: multipart form fields", function()
  it("reads the model field, not a file part's content", function()
    local body = form({
      { 'Content-Disposition: form-data; name="file"; filename="a.txt"\r\nContent-Type: text/plain', "nope" },
      { 'Content-Disposition: form-data; name="model"', "whisper" },
    }, "XyZ")
    assert.equal("whisper", router.multipart_field(body, "XyZ", "model"))
  end)

  it("a file part named model is not the model", function()
    local body = form({ { 'Content-Disposition: form-data; name="model"; filename="m"', "x" } }, "b")
    assert.is_nil(router.multipart_field(body, "b", "model"))
  end)

  it("stays linear on a body made to make pattern matching backtrack", function()
    local b = "B"
    local evil = "--B\r\nContent-Disposition: form-data; name=\"model\"\r\n" .. ("\r\n\r\n"):rep(250000)
    local t0 = os.clock()
    router.multipart_field(evil, b, "model")
    assert.is_true(os.clock() - t0 < 0.5, "took " .. (os.clock() - t0) .. " s on a 1 MB body")
  end)
end)
