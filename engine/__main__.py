"""``python -m engine build | status | clean``: the compiled engine (engine.native)."""

from engine.native import main

raise SystemExit(main())
