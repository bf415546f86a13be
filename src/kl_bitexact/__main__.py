from __future__ import annotations

from kl_bitexact.cli import main

raise SystemExit(main())
