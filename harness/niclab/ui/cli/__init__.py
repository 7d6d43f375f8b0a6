"""The `niclab` command: main (global options and dispatch), one module per verb (its command and its parser),
and options (what several verbs' parsers share)."""
