"""Test-wide settings: one BLAS thread (as the `corral` command uses), set before numpy loads."""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
