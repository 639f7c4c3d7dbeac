--- obleth.api.json: the name router.lua still requires; the module is obleth.util.json.
-- Temporary: delete this file once lua/obleth/router.lua (owned by the router work) requires
-- obleth.util.json.
return require "obleth.util.json"
