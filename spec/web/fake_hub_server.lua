-- The project's stand-in Hugging Face Hub (spec/support/fake_hub.lua) as a process, for the browser
-- tests: `build/obleth lua spec/web/fake_hub_server.lua` prints "hub listening on <url>" and serves
-- until it is killed (SIGTERM). Only for tests: it stands in for what cannot run here.
package.path = "./?.lua;" .. package.path
local loop = require("obleth.loop")
local hub = require("spec.support.fake_hub").start()
io.stdout:write("hub listening on ", hub.url, "\n")
io.stdout:flush()
while true do loop.sleep(3600) end
