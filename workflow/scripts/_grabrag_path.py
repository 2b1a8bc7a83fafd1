"""Makes rule scripts import this checkout's ``grabrag``, the library the workflow hashed.

Snakemake adds this scripts folder to sys.path; importing this module first makes the
library importable in conda environments and on cluster nodes too, where the package
is not pip-installed. The checkout's ``workflow/`` goes to the front of sys.path even
when it is already there: Snakemake's script preamble appends the parent process's path
after site-packages, so an installed copy (a non-editable install, a venv shared by two
checkouts) would otherwise be imported, and a job would run other code than the code
its plan was hashed from. A ``grabrag`` already imported from elsewhere stops the job,
naming both paths.
"""

import sys
from pathlib import Path

_WORKFLOW = str(Path(__file__).resolve().parents[1])
while _WORKFLOW in sys.path:
    sys.path.remove(_WORKFLOW)
sys.path.insert(0, _WORKFLOW)

import grabrag  # noqa: E402

_EXPECTED = Path(_WORKFLOW) / "grabrag"
_LOADED = Path(grabrag.__file__).resolve().parent
if _LOADED != _EXPECTED:
    raise ImportError(
        f"this job imported grabrag from {_LOADED}, but the workflow runs (and hashed) the "
        f"library at {_EXPECTED}; uninstall the other copy or run from its checkout"
    )
