"""The gate's verdict as JUnit XML, the format Jenkins, GitLab and GitHub test reporters
read: one test suite, the verdict as one test case (its failure message holds the
interval against the margin), and each paired sample as a test case that fails when the
candidate's score fell below the baseline's."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path

from gradetrail.ci.text import xml_text
from gradetrail.gate import GateResult

__all__ = ["cannot_compare_junit", "gate_junit", "write_junit"]


def gate_junit(result: GateResult, *, name: str = "gradetrail gate") -> ET.ElementTree:
    """The JUnit document of one gate result.

    The shape is the common one (the Jenkins xunit plugin's ``junit-10.xsd``):
    ``<testsuites><testsuite name tests failures errors skipped time timestamp>``, a
    ``<properties>`` block naming the runs, margin and method, then ``<testcase>``
    elements. The verdict's test case is named ``non-inferiority``; per-sample test cases
    are named by sample id, with ``classname`` ``gradetrail.samples``.
    """
    regressed = set(result.regressed)
    failures = len(regressed) + (0 if result.passed else 1)
    tests = 1 + len(result.paired)
    suites = ET.Element(
        "testsuites", name=xml_text(name), tests=str(tests), failures=str(failures), errors="0"
    )
    suite = ET.SubElement(
        suites,
        "testsuite",
        name=xml_text(name),
        tests=str(tests),
        failures=str(failures),
        errors="0",
        skipped="0",
        time="0",
        timestamp=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S"),
    )
    properties = ET.SubElement(suite, "properties")
    for key, value in (
        ("baseline", result.baseline),
        ("candidate", result.candidate),
        ("margin", f"{result.margin:g}"),
        ("confidence", f"{result.confidence:g}"),
        ("method", result.method),
        ("samples", str(result.n)),
    ):
        ET.SubElement(properties, "property", name=key, value=xml_text(value))
    verdict = ET.SubElement(
        suite, "testcase", name="non-inferiority", classname="gradetrail.gate", time="0"
    )
    interval = _interval_text(result)
    if not result.passed:
        failure = ET.SubElement(verdict, "failure", type="NonInferiorityFailed")
        failure.set("message", xml_text(f"FAIL: {interval}"))
        failure.text = xml_text(_details(result))
    else:
        ET.SubElement(verdict, "system-out").text = xml_text(f"PASS: {interval}")
    for sid in result.paired:
        case = ET.SubElement(
            suite, "testcase", name=xml_text(sid), classname="gradetrail.samples", time="0"
        )
        if sid in regressed:
            message = "regressed: the candidate scored lower than the baseline on this sample"
            ET.SubElement(case, "failure", type="Regression", message=message)
    ET.indent(suites)
    return ET.ElementTree(suites)


def cannot_compare_junit(message: str, *, name: str = "gradetrail gate") -> ET.ElementTree:
    """The JUnit document of a gate that could not compare its runs (exit 2): the verdict's
    test case in error, with ``message`` (what to fix)."""
    suites = ET.Element("testsuites", name=name, tests="1", failures="0", errors="1")
    suite = ET.SubElement(
        suites, "testsuite", name=name, tests="1", failures="0", errors="1", skipped="0"
    )
    case = ET.SubElement(
        suite, "testcase", name="non-inferiority", classname="gradetrail.gate", time="0"
    )
    ET.SubElement(case, "error", type="CannotCompare", message=xml_text(message))
    ET.indent(suites)
    return ET.ElementTree(suites)


def write_junit(document: ET.ElementTree, path: Path) -> None:
    """Write a JUnit document (:func:`gate_junit`, :func:`cannot_compare_junit`) to
    ``path``, UTF-8 with an XML declaration.

    Raises:
        OSError: the file cannot be written.
    """
    document.write(path, encoding="utf-8", xml_declaration=True)


def _interval_text(result: GateResult) -> str:
    level = f"{result.confidence:.0%}"
    return (
        f"mean difference {result.delta:+.4f} (candidate - baseline), {level} interval "
        f"[{result.lo:+.4f}, {result.hi:+.4f}], pass iff lower bound >= {-result.margin:g}"
    )


def _details(result: GateResult) -> str:
    lines = [
        f"baseline {result.baseline}: mean {result.baseline_mean:.4f}",
        f"candidate {result.candidate}: mean {result.candidate_mean:.4f}",
        f"{result.n} paired samples, {len(result.regressed)} regressed, "
        f"{len(result.improved)} improved ({result.method})",
    ]
    lines += [f"identity differs: {d}" for d in result.identity_differences]
    return "\n".join(lines)
