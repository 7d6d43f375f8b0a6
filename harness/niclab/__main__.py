from niclab.cli import main

raise SystemExit(main())
