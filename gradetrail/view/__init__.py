"""The local, read-only web viewer: ``gradetrail view`` (needs ``gradetrail[view]``).

:func:`create_app` builds the Starlette application over a results root;
:func:`serve` runs it under uvicorn. See :mod:`gradetrail.view.app` for the pages and
the security rules.
"""

from gradetrail.view.app import create_app
from gradetrail.view.server import serve

__all__ = ["create_app", "serve"]
