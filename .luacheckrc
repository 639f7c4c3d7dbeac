-- luacheck configuration: Lua 5.4, no globals anywhere.
std = "lua54"
max_line_length = 130
files["spec/**/*_spec.lua"] = { std = "+busted" }
files["spec/support/obleth_output.lua"] = { std = "+busted" }
exclude_files = { "build/**" }
