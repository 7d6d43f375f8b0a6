"""The `niclab` command: main (the verbs), lab and vagrant (their sub-commands)."""
