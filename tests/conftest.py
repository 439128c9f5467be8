"""Test-wide settings: one BLAS thread (as the `corral` command uses), set before numpy loads."""

import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# This folder on sys.path: test modules `import datafiles` (where the datasets are, issue 37).
sys.path.append(os.path.dirname(os.path.abspath(__file__)))
