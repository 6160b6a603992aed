"""``python -m rltrainer ...`` is the same as the ``rltrainer`` console script."""

import sys

from .cli import main

sys.exit(main())
