"""Puts ``workflow/`` on sys.path so rule scripts import ``grabrag`` without an install.

Snakemake adds this scripts folder to sys.path; importing this module first makes the
library importable in conda environments and on cluster nodes too, where the package
is not pip-installed. A pip install (README) gives the same code.
"""

import sys
from pathlib import Path

_WORKFLOW = str(Path(__file__).resolve().parents[1])
if _WORKFLOW not in sys.path:
    sys.path.insert(0, _WORKFLOW)
