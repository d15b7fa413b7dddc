"""How one process becomes a rank: which launcher started it (`launch_env`) and joining or leaving the
process group, with the backend and GPU it gets on its machine (`process_group`). Below both strategies
and launching; imports neither."""
