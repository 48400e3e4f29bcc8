"""PR bodies in the tree's ``.github/PULL_REQUEST_TEMPLATE.md``.

A body says what three sources say, and nothing else:

* the commit message of each of the PR's patches: what and why (its
  ``Test plan:`` paragraph describes the test under Validation);
* the patch's evidence file (format in ``pr.py``'s docstring): the test
  command, its output on the base commit and with the change, and the
  change's own measurements, each quoted verbatim with its tree, host,
  versions and date; its optional ``## Related`` section, hand-written, is
  the only related-work text;
* the checks ``make pr`` ran on the PR's branch (the tree's pre-commit hooks
  and the pinned ruff), one line.

Plus what vLLM's ``AGENTS.md`` requires of AI-assisted work: a statement that
AI assistance was used and the human submitter's checklist (duplicate-work
check, every line reviewed, the commands run, a model evaluation where a
kernel changes). No figure comes from anywhere but the PR's own evidence
files and commit messages, and a body with an open code fence or the word
"session" is refused (:func:`lint`).
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from . import pr_hooks

FALLBACK_TEMPLATE = """\
## Purpose

## Test Plan

## Test Result
"""
RUN_FIELDS = ("Command", "Tree", "Host", "Versions", "Date")
MAX_EXCERPT_LINES = 30
WORD_BUDGET = 350  # prose words a body should stay under (outputs excluded)


class EvidenceError(ValueError):
    """An evidence file that cannot be quoted; the message names the file."""


# --------------------------------------------------------------------------
# Evidence files


@dataclass(frozen=True)
class Run:
    """One command run, as an evidence file records it."""

    title: str  # "Before", "After" or the measurement's title
    command: str
    tree: str  # "pristine ..." or "patched ..."
    host: str
    versions: str
    date: str
    output: str  # the excerpt, verbatim
    note: str = ""  # the author's words around it, verbatim

    @property
    def where(self) -> str:
        return f"{self.host}; {self.versions}; {self.date}"


@dataclass(frozen=True)
class Evidence:
    path: Path
    patch: str  # the subject of the patch it is for
    before: Run | None  # None only for a change without a test (a pin bump)
    after: Run | None
    measurements: tuple[Run, ...] = ()
    related: str = ""
    claims: tuple[str, ...] = ()  # hand-written `Claim:` lines, the body's Claims


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_FIELD = re.compile(rf"^(?:[-*]\s+)?({'|'.join(RUN_FIELDS)}):\s*(.*?)\s*$")


def _unquote(value: str) -> str:
    m = re.fullmatch(r"`([^`]+)`", value)
    return m.group(1) if m else value


def _run(path: Path, title: str, lines: list[tuple[int, str]]) -> Run:
    fields: dict[str, str] = {}
    outputs: list[list[str]] = []
    note: list[str] = []
    fence: tuple[int, str] | None = None
    for lineno, line in lines:
        m = _FENCE.match(line)
        if fence is not None:
            if m and m.group(1)[0] == fence[1][0] and len(m.group(1)) >= len(fence[1]):
                fence = None
            else:
                outputs[-1].append(line)
            continue
        if m:
            fence = (lineno, m.group(1))
            outputs.append([])
            continue
        f = _FIELD.match(line)
        if f:
            if f.group(1) in fields:
                raise EvidenceError(f"{path}:{lineno}: `{f.group(1)}:` given twice in {title}")
            fields[f.group(1)] = _unquote(f.group(2))
        elif line.strip() or note:
            note.append(line)
    if fence is not None:
        raise EvidenceError(f"{path}:{fence[0]}: code fence never closed ({title})")
    missing = [k for k in RUN_FIELDS if not fields.get(k)]
    if missing:
        raise EvidenceError(
            f"{path}: {title} lacks {', '.join(f'`{k}:`' for k in missing)} "
            f"(every run gives {', '.join(RUN_FIELDS)})"
        )
    if len(outputs) != 1:
        raise EvidenceError(
            f"{path}: {title} needs exactly one fenced output excerpt, not {len(outputs)}"
        )
    output = "\n".join(outputs[0]).strip("\n")
    if not output.strip():
        raise EvidenceError(f"{path}: {title}: the output excerpt is empty")
    if len(outputs[0]) > MAX_EXCERPT_LINES:
        raise EvidenceError(
            f"{path}: {title}: the output excerpt has {len(outputs[0])} lines; quote at most "
            f"{MAX_EXCERPT_LINES} (the failing assertion and pytest's summary line)"
        )
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", fields["Date"]):
        raise EvidenceError(f"{path}: {title}: `Date:` is YYYY-MM-DD, not {fields['Date']!r}")
    m = re.match(r"(pristine|patched)\b", fields["Tree"], re.I)
    kind = m.group(1).lower() if m else ""
    if not kind:
        raise EvidenceError(
            f"{path}: {title}: `Tree:` starts with `pristine` or `patched`, not {fields['Tree']!r}"
        )
    want = {"Before": "pristine", "After": "patched"}.get(title)
    if want and kind != want:
        raise EvidenceError(f"{path}: {title} runs on the {want} tree, not {fields['Tree']!r}")
    return Run(
        title,
        fields["Command"],
        fields["Tree"],
        fields["Host"],
        fields["Versions"],
        fields["Date"],
        output,
        "\n".join(note).strip(),
    )


def read_evidence(path: Path, subject: str, has_test: bool = True) -> Evidence:
    """The evidence file ``path`` of the patch whose subject is ``subject``.

    A patch that adds or changes no test (``has_test`` False, e.g. a
    dependency pin) may have measurements only: then there is no test to show
    failing before and passing after."""
    text = path.read_text()
    sections: list[tuple[str, int, list[tuple[int, str]]]] = []
    patch: str | None = None
    claimed: list[str] = []
    in_fence = False
    for lineno, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            in_fence = not in_fence
        head = None if in_fence else re.match(r"^##\s+(.*?)\s*$", line)
        if head:
            sections.append((head.group(1), lineno, []))
        elif sections:
            sections[-1][2].append((lineno, line))
        elif m := re.match(r"^Patch:\s*(.*?)\s*$", line):
            patch = m.group(1)
        elif m := re.match(r"^Claim:\s*(\S.*?)\s*$", line):
            claimed.append(m.group(1))
        elif line.strip() and not re.match(r"^#\s", line):
            raise EvidenceError(
                f"{path}:{lineno}: only a `# title`, the `Patch:` line and `Claim:` lines go "
                "before the first `##` section"
            )
    if patch is None:
        raise EvidenceError(f"{path}: no `Patch: <subject>` line")
    if patch != subject:
        raise EvidenceError(
            f"{path} is for {patch!r}, not for this patch, {subject!r}: "
            "renumbered or reworded? Move or update the file"
        )
    runs: dict[str, Run] = {}
    measurements: list[Run] = []
    related = ""
    for title, lineno, lines in sections:
        if title in ("Before", "After"):
            if title in runs:
                raise EvidenceError(f"{path}:{lineno}: a second `## {title}` section")
            runs[title] = _run(path, title, lines)
        elif m := re.fullmatch(r"Measurement:\s*(\S.*)", title):
            measurements.append(_run(path, m.group(1), lines))
        elif title == "Related":
            related = "\n".join(line for _, line in lines).strip()
        else:
            raise EvidenceError(
                f"{path}:{lineno}: unknown section `## {title}` (sections: Before, After, "
                "Measurement: <title>, Related)"
            )
    if has_test or runs:
        for title in ("Before", "After"):
            if title not in runs:
                raise EvidenceError(f"{path}: no `## {title}` section")
    elif not measurements:
        raise EvidenceError(
            f"{path}: no `## Measurement: <title>` section (a change without a test shows "
            "what it changes by a measurement)"
        )
    problems = fence_problems(related)
    if problems:
        raise EvidenceError(f"{path}: Related: {problems[0]}")
    return Evidence(
        path,
        patch,
        runs.get("Before"),
        runs.get("After"),
        tuple(measurements),
        related,
        tuple(claimed),
    )


# --------------------------------------------------------------------------
# What a body is made of


@dataclass
class CheckLine:
    """One check ``make pr`` ran (or could not run) for a PR."""

    name: str
    command: str
    status: str  # passed | failed | pre-existing | not run
    detail: str = ""


@dataclass
class Part:
    """One of the PR's patches."""

    number: str
    subject: str
    message: str  # the commit message body, trailers dropped
    evidence: Evidence | None
    evidence_path: Path  # where its evidence file is, or is to be written


@dataclass
class BodyInput:
    base: str
    title: str
    branch: str
    parts: list[Part]
    depends: list[tuple[str, str, str, list[str]]]  # (number, title, branch, reasons)
    checks: list[CheckLine]
    submitter: str  # "Name <email>"
    coauthor: str
    touches_outputs: list[str] = field(default_factory=list)  # kernels whose code changes


def split_message(message: str) -> tuple[str, str, list[str]]:
    """(what and why, the test plan's prose, the test plan's commands) of a
    commit message: its paragraph that starts with ``Test plan:`` is the test
    plan (indented lines are commands; ``test_x: ...`` lines one item per
    test), every other paragraph what and why."""
    what: list[str] = []
    plan = ""
    for para in re.split(r"\n[ \t]*\n", message.strip("\n")):
        if not plan and para.startswith("Test plan:"):
            plan = para[len("Test plan:") :]
        else:
            what.append(para)
    prose: list[str] = []
    commands: list[str] = []
    for line in plan.splitlines():
        if line.startswith((" ", "\t")) and line.strip():
            commands.append(line.strip())
        elif m := re.match(r"^(test_\w+):\s*(.*)$", line.strip()):
            prose.append(f"- `{m.group(1)}`: {m.group(2)}")  # one test per item
        elif line.strip():
            if prose:
                prose[-1] += " " + line.strip()
            else:
                prose.append(line.strip())
    return "\n\n".join(what).strip(), "\n".join(prose), commands


def unwrap(text: str) -> str:
    """A hard-wrapped commit message as Markdown (GitHub breaks a PR body's
    lines where its source breaks them): each paragraph and list item on one
    line; indented lines that continue no list item (a quoted log line, a
    table of results) are kept as they are, in a text block."""
    out: list[str] = []
    for para in re.split(r"\n[ \t]*\n", text.strip("\n")):
        blocks: list[tuple[str, list[str]]] = []  # ("text" | "list" | "pre", lines)
        for line in para.splitlines():
            indented = line.startswith((" ", "\t"))
            if re.match(r"^\s*([-*]|\d+[.)])\s", line):
                blocks.append(("list", [line.strip()]))
            elif indented and blocks and blocks[-1][0] == "list":
                blocks[-1][1][-1] += " " + line.strip()
            elif indented:
                if not blocks or blocks[-1][0] != "pre":
                    blocks.append(("pre", []))
                blocks[-1][1].append(line)
            elif blocks and blocks[-1][0] in ("text", "list"):
                blocks[-1][1][-1] += " " + line.strip()
            else:
                blocks.append(("text", [line.strip()]))
        rendered: list[str] = []
        for kind, lines in blocks:
            if kind == "pre":
                rendered.append(_fenced("text", textwrap.dedent("\n".join(lines))))
            elif kind == "list" and rendered and not rendered[-1].startswith("```"):
                rendered[-1] += "\n" + "\n".join(lines)
            else:
                rendered.append("\n".join(lines))
        out.append("\n\n".join(rendered))
    return "\n\n".join(out)


def _plain_title(subject: str) -> str:
    return re.sub(r"^(\[[^\]]*\]\s*)+", "", subject).strip().rstrip(".")


def _last_line(output: str) -> str:
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    return lines[-1].strip("= ") if lines else ""


def _fenced(lang: str, text: str) -> str:
    return f"```{lang}\n{text}\n```"


def _commands(commands: list[str]) -> str:
    """Commit-message command lines (continuations end in a backslash)."""
    out: list[str] = []
    for c in commands:
        out.append(("  " + c) if out and out[-1].endswith("\\") else c)
    return "\n".join(out)


# --------------------------------------------------------------------------
# Blocks


def overview(b: BodyInput) -> str:
    out = [f"{_plain_title(b.title)} (vLLM v{b.base}). AI-assisted: see the end of Details."]
    for number, title, branch, reasons in b.depends:
        why = "".join(f"; {r}" for r in reasons[:2])
        out += ["", f"Stacked on {number}, *{title}* (branch `{branch}`{why}): merge that first."]
    return "\n".join(out)


_PYTEST_SUMMARY = re.compile(r"\b\d+ (passed|failed|errors?)\b")


def claims(b: BodyInput) -> str:
    """The evidence's `Claim:` lines; else, where both runs end in pytest's
    summary, those two lines; and each measurement's title."""
    out: list[str] = []
    for part in b.parts:
        ev = part.evidence
        if len(b.parts) > 1:
            out.append(f"- {_plain_title(part.subject)}.")
        if ev is None:
            out.append(f"- No evidence yet (dry run): `{part.evidence_path}` is missing.")
            continue
        first = _last_line(ev.before.output) if ev.before else ""
        last = _last_line(ev.after.output) if ev.after else ""
        if ev.claims:
            out += [f"- {c}" for c in ev.claims]
        elif _PYTEST_SUMMARY.search(first) and _PYTEST_SUMMARY.search(last):
            out.append(
                f"- The test under Validation on v{b.base}: `{first}`; with this change: `{last}`."
            )
        out += [f"- {_sentence(m.title)}." for m in ev.measurements]
    return "\n".join(out or [f"- {_plain_title(b.title)}."])


def _sentence(title: str) -> str:
    """A measurement's title as a bullet or heading: its first letter upper-case."""
    return title[:1].upper() + title[1:]


def _run_block(run: Run, label: str, show_command: bool, show_where: bool) -> list[str]:
    out = [f"**{label}**, {run.tree}{'; ' + run.where if show_where else ''}:", ""]
    if run.note:
        out += [unwrap(run.note), ""]
    if show_command and "`" in run.command:
        # Commands with words around them (`a`, then `b` (what a is)): prose,
        # or the code spans' backticks would show inside a shell block.
        out += [f"Command: {run.command}", ""]
    elif show_command:
        out += [_fenced("bash", run.command), ""]
    out += [_fenced("text", run.output), ""]
    return out


def _same_command(a: str, b: str) -> bool:
    def norm(c: str) -> str:
        return " ".join(c.replace("\\\n", " ").split())

    return norm(a) == norm(b)


def validation(b: BodyInput, level: int = 3) -> str:
    """Per patch: its test plan (commit message), then its evidence: the
    command as run (where it differs from the plan's), the output on the base
    and with the change, and its measurements."""
    out: list[str] = []
    for part in b.parts:
        if len(b.parts) > 1:
            out += [f"{'#' * level} {part.subject}", ""]
        _, plan, commands = split_message(part.message)
        planned = _commands(commands)
        if planned:
            out += [_fenced("bash", planned), ""]
        if plan:
            out += [plan, ""]
        ev = part.evidence
        if ev is None:
            out += [
                f"> **Dry run: no evidence file** `{part.evidence_path}`. Record the test's "
                "output on the base commit and with this change there before opening.",
                "",
            ]
            continue
        before, after = ev.before, ev.after
        if before is not None and after is not None:
            same = before.command == after.command
            same_where = before.where == after.where
            if same and not _same_command(after.command, planned):
                out += ["Run as:", "", _fenced("bash", after.command), ""]
            out += _run_block(before, f"v{b.base}", not same, not same_where)
            out += _run_block(after, "With this change", not same, not same_where)
            if same_where:
                out += [f"Both on {after.where}.", ""]
        for m in ev.measurements:
            out += [f"{'#' * (level + (len(b.parts) > 1))} {_sentence(m.title)}", ""]
            out += _run_block(m, "Measured", True, True)
    return "\n".join(out).rstrip()


def hooks_line(b: BodyInput) -> str:
    """What the tree's pre-commit hooks said on this branch: one line, the
    hooks that passed listed in a collapsed block."""
    passed = [c for c in b.checks if c.status == "passed"]
    old = [c for c in b.checks if c.status == "pre-existing"]
    not_run = [c for c in b.checks if c.status == "not run" and c.detail != pr_hooks.PRINTS_ONLY]
    failed = [c for c in b.checks if c.status == "failed"]
    ruff = next((c.detail for c in passed if c.name == "ruff-check" and c.detail), "")
    pin = re.match(r"ruff ([\w.]+)", ruff)

    def names(checks: list[CheckLine]) -> str:
        return ", ".join(f"`{c.name}`" for c in checks)

    out = (
        f"Pre-commit: the hooks of v{b.base}'s `.pre-commit-config.yaml` that apply to this "
        f"PR's files, run on this branch{f' (ruff at its pin, {pin.group(1)})' if pin else ''}, "
        "passed"
    )
    exceptions: list[str] = []
    if old:
        exceptions.append(f"{names(old)}: the findings v{b.base} has too, none new")
    if failed:
        exceptions.append(f"**failed**: {names(failed)}")
    if not_run:
        exceptions.append("not run: " + "; ".join(f"`{c.name}`: {c.detail}" for c in not_run))
    out += (", except " + "; ".join(exceptions) if exceptions else "") + "."
    if passed:
        out += f"\n\n<details><summary>Passed</summary>\n\n{names(passed)}\n\n</details>"
    return out


def details(b: BodyInput) -> str:
    out: list[str] = []
    for part in b.parts:
        what, _, _ = split_message(part.message)
        if len(b.parts) > 1:
            out += [f"**{part.subject}**", ""]
        out += [unwrap(what) or part.subject, ""]
    related = [p.evidence.related for p in b.parts if p.evidence and p.evidence.related]
    if related:
        out += ["**Related work**", "", *map(unwrap, related), ""]
    out += [submitter_block(b)]
    return "\n".join(out).rstrip()


def submitter_block(b: BodyInput) -> str:
    name = b.submitter.split(" <")[0]
    lines = [
        "**AI assistance was used** for this change, its tests and this description "
        f"(`Co-authored-by: {b.coauthor}`). The submitter, {b.submitter}, before opening:",
        "",
        "- [ ] checked for duplicate work (`gh pr list --repo vllm-project/vllm --state open "
        '--search "<area keywords>"`, the linked issues): none open;',
        f"- [ ] {name} reviewed every changed line;",
        f"- [ ] {name} ran the commands under Validation and got the outputs shown.",
    ]
    if b.touches_outputs:
        kernels = ", ".join(f"`{k}`" for k in b.touches_outputs[:3])
        lines.append(
            f"- [ ] Model evaluation before and after (this changes {kernels}): `<results>`."
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------
# The template


def fill_template(template: str, sections: dict[str, str]) -> str:
    """Put ``sections`` under the template's headings of the same name (their
    placeholder text replaced); those it lacks go before the ``---`` line."""
    lines = template.splitlines()
    lines = [ln for ln in lines if not ln.startswith("PLEASE FILL IN THE PR DESCRIPTION")]
    out: list[str] = []
    done: set[str] = set()
    i = 0
    while i < len(lines):
        line = lines[i]
        m = re.match(r"^##\s+(.*?)\s*$", line)
        if m and m.group(1) in sections:
            out += [line, "", sections[m.group(1)].rstrip(), ""]
            done.add(m.group(1))
            i += 1
            while i < len(lines) and not re.match(r"^(#{1,6}\s|---\s*$|<details>)", lines[i]):
                i += 1
            continue
        out.append(line)
        i += 1
    missing = [s for s in sections if s not in done]
    tail = [ln for s in missing for ln in (f"## {s}", "", sections[s].rstrip(), "")]
    if missing:
        cut = next((k for k, ln in enumerate(out) if re.match(r"^---\s*$", ln)), len(out))
        out = out[:cut] + tail + out[cut:]
    text = "\n".join(out).rstrip() + "\n"
    # The checklist's AI box, where the template has one: it was used.
    return re.sub(r"^- \[ \] (AI assistance was used[^\n]*)$", r"- [x] \1", text, flags=re.M | re.I)


def template_headings(template: str) -> list[str]:
    return [m.group(1).strip() for m in re.finditer(r"^##\s+(.*?)\s*$", template, re.M)]


def render(b: BodyInput, template: str) -> str:
    heads = template_headings(template)
    if "Overview" in heads and "Validation" in heads:  # vLLM 0.27+
        sections = {
            "Overview": overview(b),
            "Claims": claims(b),
            "Validation": "\n\n".join([validation(b), hooks_line(b)]),
            "Details": details(b),
        }
    else:  # Purpose / Test Plan / Test Result
        sections = {
            "Purpose": "\n\n".join([overview(b), claims(b), details(b)]),
            "Test Plan": validation(b),
            "Test Result": hooks_line(b),
        }
    filled = fill_template(template, sections)
    head = f"<!-- title: {b.title} | branch: {b.branch} | base: v{b.base} -->\n"
    if filled.startswith("<!-- markdownlint-disable -->\n"):
        return filled.replace(
            "<!-- markdownlint-disable -->\n", "<!-- markdownlint-disable -->\n" + head, 1
        )
    return head + filled


# --------------------------------------------------------------------------
# Checks on a body


def fence_problems(text: str) -> list[str]:
    """Code fences that are never closed (CommonMark: a closing fence uses the
    opening's character, at least as many times, and nothing after it)."""
    problems: list[str] = []
    fence: tuple[int, str] | None = None
    for lineno, line in enumerate(text.splitlines(), 1):
        m = _FENCE.match(line)
        if not m:
            continue
        if fence is None:
            fence = (lineno, m.group(1))
        elif (
            m.group(1)[0] == fence[1][0]
            and len(m.group(1)) >= len(fence[1])
            and not m.group(2).strip()
        ):
            fence = None
    if fence is not None:
        problems.append(f"the code fence opened at line {fence[0]} is never closed")
    return problems


def lint(body: str) -> list[str]:
    """What makes a body unfit to open: open fences, unbalanced ``<details>``,
    lab words."""
    problems = fence_problems(body)
    if body.count("<details>") != body.count("</details>"):
        problems.append("unbalanced <details> blocks")
    for m in re.finditer(r"\bsessions?\b", body, re.I):
        line = body[: m.start()].count("\n") + 1
        problems.append(f"line {line} says {m.group(0)!r} (lab narrative, not a PR's words)")
    return problems


def prose(body: str) -> str:
    """The body without code blocks, HTML comments and the template's own
    checklist and footer: what a reviewer reads as text."""
    text = re.sub(r"<!--.*?-->", "", body, flags=re.S)
    text = re.sub(r"<details>.*?</details>", "", text, flags=re.S)
    text = re.sub(r"^\*\*BEFORE SUBMITTING.*$", "", text, flags=re.M)
    out: list[str] = []
    fence: str | None = None
    for line in text.splitlines():
        m = _FENCE.match(line)
        if m and (fence is None or (m.group(1)[0] == fence[0] and not m.group(2).strip())):
            fence = m.group(1) if fence is None else None
            continue
        if fence is None:
            out.append(line)
    return "\n".join(out)


def word_count(body: str) -> int:
    """Words of :func:`prose` (headings and list markers are not words)."""
    return len([w for w in prose(body).split() if re.search(r"[A-Za-z0-9]", w)])
