"""``python -m rltrainer.bench {allreduce,ep} ...`` (what torchrun -m runs)."""

import sys

from . import main

sys.exit(main())
