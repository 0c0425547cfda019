"""Lets the tests import attention.py from the project folder, wherever pytest is started."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
