"""``python -m gradetrail`` runs the CLI."""

from gradetrail.cli import main

main()
