"""niclab's base layer: what every other layer stands on, importing nothing of niclab's above it.

errors (NiclabError and its exit codes), problems (a file's problems with their positions), yamlpos
(YAML with the position of every value), paths (cache, state, source tree), procs (the host processes
niclab starts), atomic and filelock (files written whole, locks), node (the Node protocol every guest
handle implements, command results, Progress).
"""
