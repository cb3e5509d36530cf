"""``python -m natsbroker``: the same as the ``natsbroker`` command."""

import sys

from natsbroker.cli import main

if __name__ == "__main__":
    sys.exit(main())
