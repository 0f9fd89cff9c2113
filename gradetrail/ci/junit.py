"""The gate's verdict as JUnit XML, the format Jenkins, GitLab and GitHub test reporters
read: one test suite per comparison, its verdict as one test case (the failure message
holds the interval against the margin), and each paired sample as a test case that fails
when the candidate's score fell below the baseline's."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path

from gradetrail.analysis.gate import GateFamily, GateResult, needed_line
from gradetrail.ci.text import xml_text

__all__ = ["cannot_compare_junit", "gate_junit", "verdict_line", "write_junit"]

NAME = "gradetrail gate"


def gate_junit(family: GateFamily) -> ET.ElementTree:
    """The JUnit document of a gate (one comparison, or several Holm-corrected).

    The shape is the common one (the Jenkins xunit plugin's ``junit-10.xsd``):
    ``<testsuites>`` holding one ``<testsuite name tests failures errors skipped time
    timestamp>`` per comparison, each with a ``<properties>`` block (runs, test, margin,
    method, family) and ``<testcase>`` elements: the verdict, named after the test
    (``non-inferiority``...), classname ``gradetrail.analysis.gate``; then one per paired sample,
    named by sample id, classname ``gradetrail.samples``, failed when it regressed.
    """
    suites = ET.Element("testsuites", name=NAME)
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S")
    for result in family.results:
        _suite(suites, result, family, stamp)
    totals = {"tests": 0, "failures": 0, "errors": 0}
    for suite in suites:
        for key in totals:
            totals[key] += int(suite.get(key, "0"))
    for key, value in totals.items():
        suites.set(key, str(value))
    ET.indent(suites)
    return ET.ElementTree(suites)


def _suite(parent: ET.Element, result: GateResult, family: GateFamily, stamp: str) -> None:
    regressed = set(result.regressed)
    failures = len(regressed) + (0 if result.passed else 1)
    name = NAME if len(family.results) == 1 else f"{NAME}: {result.candidate}"
    suite = ET.SubElement(
        parent,
        "testsuite",
        name=xml_text(name),
        tests=str(1 + len(result.paired)),
        failures=str(failures),
        errors="0",
        skipped="0",
        time="0",
        timestamp=stamp,
    )
    properties = ET.SubElement(suite, "properties")
    for key, value in (
        ("baseline", result.baseline),
        ("candidate", result.candidate),
        ("test", result.test),
        ("margin", f"{result.margin:g}"),
        ("confidence", f"{result.confidence:g}"),
        ("method", result.method),
        ("samples", str(result.n)),
        ("family", result.family or "none"),
        ("metric", result.metric or "primary score"),
    ):
        ET.SubElement(properties, "property", name=key, value=xml_text(value))
    case = result.test if result.metric is None else f"{result.test} ({result.metric})"
    verdict = ET.SubElement(
        suite, "testcase", name=xml_text(case), classname="gradetrail.analysis.gate", time="0"
    )
    line = verdict_line(result)
    if result.passed:
        ET.SubElement(verdict, "system-out").text = xml_text(line)
    else:
        failure = ET.SubElement(verdict, "failure", type="GateFailed", message=xml_text(line))
        failure.text = xml_text(_details(result))
    for sid in result.paired:
        case = ET.SubElement(
            suite, "testcase", name=xml_text(sid), classname="gradetrail.samples", time="0"
        )
        if sid in regressed:
            message = "regressed: the candidate scored lower than the baseline on this sample"
            ET.SubElement(case, "failure", type="Regression", message=message)


def cannot_compare_junit(message: str) -> ET.ElementTree:
    """The JUnit document of a gate that could not compare its runs (exit 2): the verdict's
    test case in error, with ``message`` (what to fix)."""
    suites = ET.Element("testsuites", name=NAME, tests="1", failures="0", errors="1")
    suite = ET.SubElement(
        suites, "testsuite", name=NAME, tests="1", failures="0", errors="1", skipped="0"
    )
    case = ET.SubElement(
        suite, "testcase", name="gate", classname="gradetrail.analysis.gate", time="0"
    )
    ET.SubElement(case, "error", type="CannotCompare", message=xml_text(message))
    ET.indent(suites)
    return ET.ElementTree(suites)


def write_junit(document: ET.ElementTree, path: Path) -> None:
    """Write a JUnit document (:func:`gate_junit`, :func:`cannot_compare_junit`) to
    ``path``, UTF-8 with an XML declaration.

    The file is written beside ``path`` and renamed onto it, never through a link
    planted at the name (:func:`gradetrail._util.outfiles.write_file`).

    Raises:
        OSError: the file cannot be written, or the name is a symlink.
    """
    import io

    from gradetrail._util.outfiles import write_file

    buffer = io.BytesIO()
    document.write(buffer, encoding="utf-8", xml_declaration=True)
    write_file(Path(path), buffer.getvalue())


def verdict_line(result: GateResult) -> str:
    """``PASS``/``FAIL``, the difference and its interval against the test's bounds (said
    to be unadjusted in a family, where the adjusted p decides), and the gate's one-line
    reason."""
    level = f"{result.confidence:.0%}"
    if result.p_adjusted is not None:  # the family's adjusted p decides, not this interval
        level += " unadjusted"
    return (
        f"{'PASS' if result.passed else 'FAIL'} ({result.test}): mean difference "
        f"{result.delta:+.4f} (candidate - baseline), {level} interval "
        f"[{result.lo:+.4f}, {result.hi:+.4f}], margin {result.margin:g}. {result.reason}"
    ).strip()


def _details(result: GateResult) -> str:
    lines = [
        f"baseline {result.baseline}: mean {result.baseline_mean:.4f}",
        f"candidate {result.candidate}: mean {result.candidate_mean:.4f}",
        f"{result.n} samples compared ({result.method}), {len(result.regressed)} regressed, "
        f"{len(result.improved)} improved",
    ]
    needed = needed_line(result)
    if needed is not None:
        lines.append(f"samples needed: {needed}")
    lines += [f"identity differs: {d}" for d in result.identity_differences]
    return "\n".join(lines)
