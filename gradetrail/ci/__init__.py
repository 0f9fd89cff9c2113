"""What CI systems read: a score threshold without a baseline, JUnit XML, a Markdown
report and GitHub workflow annotations for the gate, and the pytest plugin's runner.

Every piece takes the results the rest of gradetrail computes (a run's manifest, a
:class:`~gradetrail.analysis.gate.GateResult`) and only formats or thresholds them.
"""
