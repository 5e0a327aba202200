from caveman_batch.cli import main

raise SystemExit(main())
