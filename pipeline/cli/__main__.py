"""``python -m rechain.pipeline.cli``: the ``rechain`` command (tests run it as a subprocess)."""

import sys

from rechain.pipeline.cli import main

if __name__ == "__main__":
    sys.exit(main())
