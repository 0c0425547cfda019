"""`python -m attnspec check TARGET`: the same as the `attnspec` command."""

import sys

from attnspec.cli import main

sys.exit(main())
