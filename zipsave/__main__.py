"""``python -m zipsave``: the same as the ``zipsave`` command."""

import sys

from .cli import main

sys.exit(main())
