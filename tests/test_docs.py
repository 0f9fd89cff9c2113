"""The README and the documentation site: the README stays a short front door whose
set-up commands exist; the generated reference pages are current (scripts/gen_docs.py);
every public name is documented; every page is in the site's navigation and every
relative link in the README and the pages points at a file that exists. `make docs`
(run by .ci/run) builds the site in strict mode on top of this."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import yaml
from paths import ROOT

import gradetrail

DOCS = ROOT / "docs"


def test_generated_pages_are_current() -> None:
    """scripts/gen_docs.py --check: the spec reference, result rows and API reference
    match what the code generates now."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_docs.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr


def test_every_public_name_is_documented() -> None:
    """Each name of gradetrail.__all__ has an entry in the API reference, and the
    hand-written pages name the ones a user meets first."""
    api = (DOCS / "reference" / "api.md").read_text()
    missing = [n for n in gradetrail.__all__ if n != "__version__" and f"## {n}\n" not in api]
    assert missing == []
    pages = "".join(p.read_text() for p in DOCS.glob("*.md"))
    for name in ("load_spec", "run_eval", "read_results", "regression_gate", "RayOptions"):
        assert name in pages


def test_every_result_field_is_in_the_reference() -> None:
    from gradetrail.rundir.results import SampleResult

    page = (DOCS / "reference" / "results.md").read_text()
    assert all(f"| `{name}` |" in page for name in SampleResult.model_fields)


def test_the_readme_is_a_short_front_door() -> None:
    """Under 8,000 characters, with the two set-up commands the Makefile defines and a
    link to every page of the site but its home page (which repeats the quickstart)."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme) < 8000
    makefile = (ROOT / "Makefile").read_text()
    for target in ("example", "test", "wheel", "docs"):
        assert re.search(rf"^{target}:", makefile, flags=re.M)
    assert "make example" in readme and "make test" in readme
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    unlinked = [
        p for p in _nav_pages(config["nav"]) if p != "index.md" and f"(docs/{p})" not in readme
    ]
    assert unlinked == []


def _nav_pages(nav: list) -> list[str]:
    out = []
    for entry in nav:
        for value in entry.values() if isinstance(entry, dict) else [entry]:
            out += _nav_pages(value) if isinstance(value, list) else [value]
    return out


def test_every_page_is_in_the_navigation_and_every_link_resolves() -> None:
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    nav = _nav_pages(config["nav"])
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert sorted(nav) == pages
    for source in [ROOT / "README.md", *DOCS.rglob("*.md")]:
        text = re.sub(r"```.*?```", "", source.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = (source.parent / target.split("#", 1)[0]).resolve()
            assert path.exists(), f"{source.relative_to(ROOT)} links to {target}"


def test_without_chromium_the_browser_tests_skip_with_one_line(tmp_path) -> None:
    """The README's promise for `make test` on a fresh machine: with no chromium on PATH
    the browser tests skip and the session says why in one line naming the package; in
    CI (GRADETRAIL_REQUIRE_CHROMIUM=1) the same absence fails."""
    env = {k: v for k, v in os.environ.items() if k not in _CHROMIUM_ENV}
    env["PATH"] = str(tmp_path)  # no chromium anywhere on it
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", _BROWSER_TESTS]
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if "apt-get install chromium" in line]
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert lines == [
        "browser tests skipped: chromium is absent (no `chromium` on PATH): "
        "`sudo apt-get install chromium` runs the browser tests"
    ]
    env["GRADETRAIL_REQUIRE_CHROMIUM"] = "1"
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 1 and "(required here: CI)" in proc.stdout


_CHROMIUM_ENV = ("CI", "GRADETRAIL_REQUIRE_CHROMIUM", "GRADETRAIL_CHROMIUM")
_BROWSER_TESTS = "tests/view/test_agreement.py"  # HTTP-level tests and a browser test


def _pages() -> list:
    """The README and every page of the site."""
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def _code_blocks(text: str, langs: tuple[str, ...]) -> list[str]:
    """The bodies of the fenced blocks in one of ``langs`` (indented ones, as in tabs,
    dedented)."""
    blocks = []
    for m in re.finditer(r"^( *)```(\w*)\n(.*?)^\1```", text, flags=re.S | re.M):
        if m.group(2) in langs:
            blocks.append(re.sub(rf"^{m.group(1)}", "", m.group(3), flags=re.M))
    return blocks


def _commands() -> list[tuple[str, str]]:
    """Every `gradetrail ...` command the pages show: a line of a shell block (its
    continuation lines joined) or an inline code span."""
    found = []
    for page in _pages():
        text = page.read_text()
        for block in _code_blocks(text, ("sh", "bash", "")):
            for line in block.replace("\\\n", " ").splitlines():
                if line.strip().startswith("gradetrail "):
                    found.append((page.name, line.strip()))
        prose = re.sub(r"```.*?```", "", text, flags=re.S).replace("\n", " ")
        found += [(page.name, span) for span in re.findall(r"`(gradetrail [^`]+)`", prose)]
    return found


def test_every_command_the_docs_show_exists_with_its_flags() -> None:
    """Each `gradetrail SUBCOMMAND --flag` on a page names a command the CLI has and
    flags that command takes (a renamed flag fails here, not in a reader's terminal)."""
    import click
    import typer.main

    from gradetrail.cli import app

    root = typer.main.get_command(app)
    ctx = click.Context(root)
    root_flags = {"--help", "--version", "--install-completion", "--show-completion"}
    wrong = []
    commands = _commands()
    for page, line in commands:
        words = line.split("#", 1)[0].split()[1:]
        command = root
        while words and hasattr(command, "list_commands"):
            sub = command.get_command(ctx, words[0])
            if sub is None:
                break
            command, words = sub, words[1:]
        if hasattr(command, "list_commands"):
            if not (words and words[0] in root_flags):
                wrong.append(f"{page}: {line}: no such command")
            continue
        flags = {"--help", "-h"} | {o for p in command.params for o in p.opts + p.secondary_opts}
        for word in words:
            flag = re.match(r"\[?(--?[a-zA-Z][\w-]*)", word)
            if flag and flag.group(1) not in flags:
                wrong.append(f"{page}: {line}: {command.name} has no {flag.group(1)}")
    assert len(commands) > 50 and wrong == []


def _deep_merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for key, value in extra.items():
        whole = isinstance(value, dict) and {"provider", "type"} & set(value)  # a new one
        if isinstance(value, dict) and isinstance(out.get(key), dict) and not whole:
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


_HTTP_MODEL = {"provider": "openai", "name": "gpt-4o-mini"}


def test_every_spec_snippet_in_the_docs_validates() -> None:
    """Each YAML block that is a spec, or a part of one (`model:`, `scorer:`, `run:` ...),
    validates: a whole spec as it is, a part merged into the bundled GSM8K spec (a
    `model` with its own provider, or a `scorer` with its own type, replaces the
    example's; a `model` without a provider is an OpenAI model's settings). Blocks with
    `...` placeholders are shapes, not specs, and are skipped."""
    from gradetrail.spec.eval import EvalSpec
    from gradetrail.spec.loading import parse_spec

    base = yaml.safe_load((ROOT / "examples" / "gsm8k.yaml").read_text())
    checked, wrong = 0, []
    for page in _pages():
        for block in _code_blocks(page.read_text(), ("yaml", "yml")):
            raw = yaml.safe_load(block)
            if not isinstance(raw, dict) or not set(raw) <= set(EvalSpec.model_fields):
                continue  # a sweep, a workflow, a pytest ini section
            if "..." in block:
                continue
            if isinstance(raw.get("model"), dict) and "provider" not in raw["model"]:
                raw["model"] = {**_HTTP_MODEL, **raw["model"]}  # settings of an HTTP provider
            spec = raw if {"name", "dataset", "model"} <= set(raw) else _deep_merge(base, raw)
            try:
                parse_spec(spec, source=f"{page.name} block")
            except gradetrail.errors.SpecError as exc:
                wrong.append(str(exc))
            checked += 1
    assert checked >= 8 and wrong == []


def test_no_page_has_a_broken_paragraph() -> None:
    """No paragraph of prose stops mid-sentence (a merge that cut a sentence leaves one
    ending in a plain word before a blank line) or starts there (indented text under a
    heading, the rest of a list item), and no heading is glued to the line above it or
    left with nothing under it before the next heading of its level."""
    broken = []
    for page in _pages():
        if page.name == "api.md" and page.parent.name == "reference":
            continue  # mkdocstrings directives, not prose
        text = re.sub(r"^( *)```.*?^\1```", "```", page.read_text(), flags=re.S | re.M)
        blocks = [b for b in re.split(r"\n\s*\n", text) if b.strip()]
        for before, block, following in zip(
            ["", *blocks[:-1]], blocks, [*blocks[1:], ""], strict=True
        ):
            if before.startswith("#") and re.match(r" +[^-*\s]", block):
                broken.append(f"{page.name}: the text under {before!r} starts mid-sentence")
            lines = block.strip().splitlines()
            first, last = lines[0].strip(), lines[-1].strip()
            if first.startswith(("#", "|", "<", "!", "=== ", "```")):
                if first.startswith("#") and len(lines) > 1:
                    broken.append(f"{page.name}: text glued under {first!r}")
                continue
            if any(line.lstrip().startswith("#") for line in lines[1:]):
                broken.append(f"{page.name}: a heading glued to the text above it: {last!r}")
            elif not re.search(r"[.:;!?)`*>\]]$", last) and not following.startswith("```"):
                broken.append(f"{page.name}: a paragraph stops mid-sentence: {last[-70:]!r}")
        for m in re.finditer(r"^(#+) (.*)\n\s*\n?(#+) ", text, flags=re.M):
            if len(m.group(3)) <= len(m.group(1)):
                broken.append(f"{page.name}: the heading {m.group(2)!r} has nothing under it")
    assert broken == [], "\n".join(broken)


def test_every_paragraph_closes_the_parentheses_it_opens() -> None:
    """A paragraph of prose opens as many parentheses as it closes (code spans and
    intervals such as (0, 1] aside): a merge that glued the tail of one sentence to the
    start of another leaves a ')' it never opened (providers.md's stop reasons began
    "`stop_sequence`, ... the provider's own value in `raw_stop_reason`), served model")."""
    unbalanced = []
    for page in _pages():
        if page.parent.name == "reference":
            continue  # generated from docstrings
        text = re.sub(r"^( *)```.*?^\1```", "", page.read_text(), flags=re.S | re.M)
        for block in re.split(r"\n\s*\n", text):
            prose = re.sub(r"`[^`]*`", "", block)
            prose = re.sub(r"[(\[]\s*[-+]?[\d.]+,\s*[-+]?[\d.]+\s*[)\]]", "", prose)
            if prose.count("(") != prose.count(")"):
                unbalanced.append(f"{page.name}: {block.strip()[:80]!r}")
    assert unbalanced == []


def test_a_block_that_shows_an_example_file_is_that_file() -> None:
    """A YAML block a page introduces as a bundled file (``(`examples/X.yaml`):``) is
    that file as it is (its opening comment aside), so what a reader copies runs."""
    shown = 0
    for page in _pages():
        pattern = r"\(`(examples/[\w/.-]+\.ya?ml)`\):\n\n```ya?ml\n(.*?)```"
        for name, block in re.findall(pattern, page.read_text(), flags=re.S):
            text = (ROOT / name).read_text()
            body = re.sub(r"\A(#.*\n)+", "", text)
            assert block == body, f"{page.name} shows {name} other than it is"
            shown += 1
    assert shown >= 1


def test_the_documented_refusals_are_what_a_run_prints(cli, tmp_path, monkeypatch) -> None:
    """The `error:` lines spec.md and troubleshooting.md show for a typo in a field name
    and in a template are, word for word, what `gradetrail run s.yaml` prints (exit 2)."""
    monkeypatch.chdir(tmp_path)
    documented = {
        line
        for page in ("spec.md", "troubleshooting.md")
        for block in _code_blocks((DOCS / page).read_text(), ("",))
        for line in block.splitlines()
        if line.startswith("error: s.yaml: ")
    }
    assert len(documented) == 2
    base = yaml.safe_load((ROOT / "examples" / "gsm8k.yaml").read_text())
    base["dataset"]["path"] = str(ROOT / "examples" / "data" / "gsm8k" / "test.jsonl")
    base["model"]["recordings"]["path"] = str(
        ROOT / "examples" / "data" / "gsm8k" / "example_model_solutions.jsonl"
    )
    typo_field = {**base, "scorer": {"type": "numeric", "markr": "A:"}}
    typo_template = {**base, "prompt": "Q: {{ questoin }}"}
    printed = set()
    for spec in (typo_field, typo_template):
        (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
        out = cli("run", "s.yaml")
        assert out.exit_code == 2
        printed.update(out.stderr.splitlines())
    assert printed == documented


def test_every_repository_path_the_docs_name_exists() -> None:
    """A path in backticks that starts at a top directory of the repository
    (`gradetrail/providers/_http.py`, `tests/run_support.py`, `examples/...`) exists, and
    development.md's layout names every package of gradetrail and no other."""
    tops = ("gradetrail/", "tests/", "examples/", "scripts/", "bench/", ".ci/", "docs/")
    missing = []
    for page in _pages():
        for token in re.findall(r"`([^`\s]+)`", page.read_text()):
            path = token.split(":")[0].split("#")[0]
            shape = re.search(r"[<>*{}$]", path)  # a pattern, not a path
            if path.startswith(tops) and not shape and not (ROOT / path).exists():
                missing.append(f"{page.name}: {token}")
    assert missing == []
    text = (DOCS / "development.md").read_text()
    layout = text[text.index("The layout is") : text.index("[Architecture]")]
    named = set(re.findall(r"`(\w+)/`", layout))
    packages = {p.parent.name for p in (ROOT / "gradetrail").glob("*/__init__.py")}
    assert named == packages - {"_util", "data"}


def _quickstart_lines(page: str) -> list[str]:
    """The `gradetrail` commands of a page's shell blocks that need no key and no server:
    the quickstart's runs of the bundled example, its gate, diff and runs listing."""
    lines = []
    for block in _code_blocks((ROOT / page).read_text(), ("sh",)):
        for line in block.splitlines():
            words = line.split("#", 1)[0].split()
            shown = words[:1] == ["gradetrail"] and words[1] in ("run", "gate", "diff", "runs")
            if shown and "provider:" not in line:
                lines.append(line)
    return lines


def test_the_quickstart_prints_what_the_pages_show(cli, tmp_path, monkeypatch) -> None:
    """Run from a checkout as README.md and docs/index.md say, the quickstart's commands
    give what the pages show: index.md's summary line for line (its wall time aside), the
    run directories the gate and diff lines name, the gate's exit 1 and its 76/360
    discordant samples, README's mean and interval, and each recorded model's mean."""
    import shlex

    monkeypatch.chdir(tmp_path)
    (tmp_path / "examples" / "data").mkdir(parents=True)
    (tmp_path / "examples" / "gsm8k.yaml").write_bytes(
        (ROOT / "examples" / "gsm8k.yaml").read_bytes()
    )
    (tmp_path / "examples" / "data" / "gsm8k").symlink_to(ROOT / "examples" / "data" / "gsm8k")
    index, readme = (DOCS / "index.md").read_text(), (ROOT / "README.md").read_text()

    first = cli("run", "examples/gsm8k.yaml", results=False)
    (shown,) = [b for b in _code_blocks(index, ("",)) if b.startswith("gsm8k  replay:")]
    printed = [line for line in first.stdout.splitlines() if "wall time" not in line]
    assert printed == [line for line in shown.splitlines() if "wall time" not in line]
    mean = re.search(r"`175b_verification` gets (0\.\d+), 95% CI\s+(\[[\d., ]+\])", readme)
    assert mean and f"mean score  {mean[1]} ± " in first.stdout and mean[2] in first.stdout

    for page in ("README.md", "docs/index.md"):
        for line in _quickstart_lines(page):
            out = cli(*shlex.split(line.split("#", 1)[0])[1:], results=False)
            expected = 1 if "gradetrail gate" in line else 0
            assert out.exit_code == expected, f"{page}: {line}\n{out.stdout}{out.stderr}"
            if "gradetrail gate" in line:
                gained, lost = re.search(
                    r"solves (\d+) problems the baseline misses, and "
                    r"misses (\d+) it solves",
                    index,
                ).groups()
                assert re.search(rf"only baseline passed +│ {lost} ", out.stdout)
                assert re.search(rf"only candidate passed +│ {gained} ", out.stdout)

    means = index[index.index("reproduce their authors' correctness labels") :]
    means = means[: means.index("\n\n")]
    pairs = re.findall(r"(\d+b_\w+) (0\.\d{4})", means)
    assert len(pairs) == 4
    for model, figure in pairs:
        out = cli("run", "examples/gsm8k.yaml", "--set", f"model.name={model}", results=False)
        assert f"mean score  {figure} ± " in out.stdout, (model, out.stdout)


def test_a_commented_figure_is_what_the_command_prints(cli) -> None:
    """A `gradetrail power` line whose comment gives a figure (gate.md's `# samples
    needed: 969`) prints that figure."""
    import shlex

    checked = 0
    for page in _pages():
        for block in _code_blocks(page.read_text(), ("sh",)):
            for line in block.splitlines():
                found = re.match(r"gradetrail (power .*?)#\s*samples needed: (\d+)", line)
                if found:
                    out = cli(*shlex.split(found[1]))
                    assert out.exit_code == 0 and f"n = {found[2]} samples" in out.stdout, line
                    checked += 1
    assert checked >= 1


def test_the_bad_input_count_spec_md_gives_is_the_corpus() -> None:
    """spec.md's "`tests/data/bad_input.yaml` holds N such inputs" counts its cases (it
    said 226 while the corpus held 228)."""
    text = " ".join((DOCS / "spec.md").read_text().split())
    shown = re.search(r"`tests/data/bad_input\.yaml` holds (\d+) such inputs", text)
    cases = yaml.safe_load((ROOT / "tests" / "data" / "bad_input.yaml").read_text())
    assert shown and int(shown[1]) == len(cases)


def test_a_whole_spec_a_page_shows_runs_beside_the_examples(cli, tmp_path) -> None:
    """A YAML block that is a whole spec (name, dataset, model) runs as written from the
    examples directory (its paths relative to it), exit 0: spec.md's opening spec scores
    0.5625, as it says."""
    (tmp_path / "data").symlink_to(ROOT / "examples" / "data")
    ran = 0
    for page in _pages():
        for block in _code_blocks(page.read_text(), ("yaml", "yml")):
            raw = yaml.safe_load(block)
            if not (isinstance(raw, dict) and {"name", "dataset", "model"} <= set(raw)):
                continue
            (tmp_path / "shown.yaml").write_text(block)
            out = cli("run", str(tmp_path / "shown.yaml"))
            assert out.exit_code == 0, f"{page.name}: {out.stderr}"
            if page.name == "spec.md":
                assert "mean score  0.5625 ± " in out.stdout
            ran += 1
    assert ran >= 1
