-- luacheck: read globals help whatis myFileName prepend_path pathJoin
-- (the functions Lmod gives a modulefile)
-- Lmod modulefile: obleth's stand-in engines (spec/engines/README.md) first on PATH, the way a
-- site's module puts its engines there. The engine specs name it in Cluster defaults' modules
-- (engines/standin) with MODULEPATH=<repo>/spec/engines/modulefiles in Cluster defaults'
-- environment, so a job finds vllm, llama-server, ollama, ray and apptainer only after
-- `module load`, and python3 -m sglang.launch_server through PYTHONPATH.
help([[obleth's stand-in engines: vllm, llama-server, ollama, ray, apptainer, sglang.launch_server]])
whatis("Name: engines/standin")
local root = myFileName():match("^(.*)/modulefiles/[^/]+/[^/]+$")
prepend_path("PATH", pathJoin(root, "bin"))
prepend_path("PYTHONPATH", pathJoin(root, "py"))
