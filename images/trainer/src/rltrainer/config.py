"""The run config under its older import path: everything here is ``rltrainer.contract``.

The schema, the validator and the names the kit shares with the trainer live in
``rltrainer.contract`` (PyYAML and the standard library only). This module keeps
``from rltrainer.config import parse_run_config`` working for scripts written against it;
new code imports ``rltrainer.contract``.
"""

from .contract import *  # noqa: F401,F403 - the old import path re-exports the contract
from .contract import __all__  # noqa: F401
