"""``python -m shellward.cli``: the same as the ``shellward`` console script."""

import sys

from shellward.cli import main

sys.exit(main())
