from caveman_batch._entry import main

raise SystemExit(main())
