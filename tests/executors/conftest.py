"""The executor tests share one contract suite (contract.py) and a test worker (worker.py);
this folder goes on sys.path so the test modules import them as `import contract`."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
