"""Stand-in for SGLang (spec/engines/README.md): only `python3 -m sglang.launch_server`."""
