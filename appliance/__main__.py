"""``python -m appliance``: the same as the ``appliance`` console script."""

from appliance.cli import main

raise SystemExit(main())
