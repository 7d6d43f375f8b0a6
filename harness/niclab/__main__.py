from niclab.ui.cli.main import main

raise SystemExit(main())
