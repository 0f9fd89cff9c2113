"""``python -m gradetrail`` runs the CLI."""

import sys

from gradetrail._util import gcpause

gcpause.pause_for(sys.argv)  # from before the CLI's own imports: see gcpause

from gradetrail.cli import main  # noqa: E402 - after the pause begins

main()
