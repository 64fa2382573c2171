"""`python -m dsv4deploy.cli`: the `dsv4deploy` command, as the console script runs it."""

from dsv4deploy.cli import main

raise SystemExit(main())
