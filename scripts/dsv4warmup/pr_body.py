"""PR bodies in the tree's ``.github/PULL_REQUEST_TEMPLATE.md``.

vLLM 0.25/0.26 ask for Purpose / Test Plan / Test Result; 0.33 for Overview /
Claims / Validation / Details and a checklist with "AI assistance was used".
A body carries what vLLM's ``AGENTS.md`` requires of AI-assisted PRs:

* a clear statement that AI assistance was used;
* a block the human submitter fills in (placeholders), with the line that they
  must review every changed line and rerun the tests before opening the PR;
* why it is not duplicate work ("Related work": the upstream PRs on these
  kernels and how this one differs);
* the commands that were run, with their results: exactly the ones
  ``make pr`` ran, nothing it did not run;
* measured figures from ``docs/gpu-results.md`` and, when the PR changes a
  kernel or its launch path, the evidence that outputs are unchanged on valid
  input (or a line saying it is missing).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ISSUE = "vllm-project/vllm#48809"
FALLBACK_TEMPLATE = """\
## Purpose

## Test Plan

## Test Result
"""

# The model-specific JIT kernels of the upstream issue, and what launches them.
KERNELS = (
    "eagle_prepare_next_token_padded_kernel",
    "eagle_prepare_inputs_padded_kernel",
    "eagle_step_slot_mapping_metadata_kernel",
    "_mtp_shared_head_rmsnorm_kernel",
    "_build_c128a_topk_metadata_kernel",
    "_combine_topk_swa_indices_kernel",
    "mhc_pre_big_fuse_with_norm_tilelang",
    "mhc_pre_tilelang",
    "mhc_pre_broadcast_tilelang",
    "mhc_fused_post_pre_tilelang",
    "mhc_post_tilelang",
    "hc_head_fuse_tilelang",
    "hc_head_fused_kernel_tilelang",
    # 0.33.0 wraps some of them in classes
    "BuildC128ATopkMetadataKernel",
    "CombineTopkSwaIndicesKernel",
    "MTPSharedHeadRMSNormKernel",
)


# Topics: which related work and which measured rows belong to a PR, from the
# identifiers its code defines and uses (never from prose) and its file paths.
def topics_of(identifiers: set[str], files: list[str]) -> set[str]:
    names = {i.lower() for i in identifiers}
    # 0.33.0 names kernels as classes: CombineTopkSwaIndicesKernel, MTPSharedHeadRMSNormKernel
    flat = {n.replace("_", "") for n in names}
    paths = " ".join(files)
    out: set[str] = set()
    if any("c128a" in n for n in names):
        out.add("c128a")
    if any("combinetopkswa" in n for n in flat) or any(
        "c128a" in n and "warmup" in n for n in names
    ):
        out.add("sparse-mla")
    if (
        any(w in n for n in names for w in ("eagle", "mtp_shared_head", "spec_decode", "drafter"))
        or any("mtpsharedhead" in n for n in flat)
        or "spec_decode" in paths
    ):
        out.add("spec-decode")
    if any(n.startswith("mhc") or "_mhc" in n or "hc_head" in n for n in names) or "/mhc/" in paths:
        out.add("mhc")
    if "deepseek_v4_warmup.py" in paths:
        out.add("prewarm")
    if any("sentinel" in n or "jit_monitor" in n for n in names):
        out.add("sentinel")
    if any("compile_tilelang_warmup" in n or "tilelang_jit_warmup_num_threads" in n for n in names):
        out.add("compile-pool")
    if any("share_compiles" in n or "warmupshares" in n for n in names) or (
        "jit_warmup_sharing.py" in paths
    ):
        out.add("compile-sharing")
    return out


# Words a docs/gpu-results.md row or heading uses for each topic.
RESULT_WORDS: dict[str, tuple[str, ...]] = {
    "c128a": ("c128a",),
    "sparse-mla": ("sparse-mla", "sparse_mla", "combine"),
    "spec-decode": ("spec_decode", "spec-decode", "eagle", "mtp rmsnorm", "_mtp_shared_head"),
    "mhc": ("mhc",),
    "prewarm": ("pre-warm", "prewarm", "warm()"),
    "sentinel": ("sentinel",),
    "compile-pool": ("tilelang pool", "compile pool", "tilelang-threads"),
    "compile-sharing": ("compile sharing", "shared compiles", "share_compiles"),
}


@dataclass(frozen=True)
class Related:
    ref: str
    title: str
    state: str
    topics: tuple[str, ...]
    what: str
    differs: str


# Written from the upstream trackers (read, never copied), 2026-12.
RELATED = (
    Related(
        "vllm-project/vllm#48805",
        "[Warmup][V1] Exhaustive sparse-MLA Triton kernel warmup",
        "closed",
        ("sparse-mla", "c128a"),
        "warms `_combine_topk_swa_indices_kernel` and `_build_c128a_topk_metadata_kernel` by "
        "enumerating the whole product of int==1 cases, divisibility and pointer alignment "
        "(thousands of variants per constexpr combination).",
        "here the keys come from the serving configuration through the argument preparation the "
        "runtime itself uses, so only reachable keys compile; the C128A buffer initialisation and "
        "bound checks are a separate bug-fix PR with their own regression test.",
    ),
    Related(
        "vllm-project/vllm#48393",
        "[Spec Decode][V1] Warm all spec-decode helper kernel specializations at startup",
        "closed",
        ("spec-decode",),
        "adds `_mtp_shared_head_rmsnorm_kernel` to the helper-kernel dry run of #41481 and "
        "enumerates every int==1 combination of the EAGLE helper kernels.",
        "keys are derived from the speculative configuration (method, number of speculative "
        "tokens, block size) with launch constants shared by the launch and the warmup, instead "
        "of an exhaustive product.",
    ),
    Related(
        "vllm-project/vllm#49707",
        "Fix NVIDIA DeepSeek V4 MHC warmup coverage",
        "open",
        ("mhc",),
        "gives the NVIDIA decoder layer `hc_pre`/`hc_post` wrappers and warms one token size per "
        "reachable `n_splits` key; leaves the fused post/pre path to CUDA-graph capture.",
        "selects the compile keys (split-K, small-FMA branch, GEMM variant) in pure helpers that "
        "the wrappers launch, and compiles each distinct key once, fused post/pre and the MTP "
        "draft layers included.",
    ),
    Related(
        "vllm-project/vllm#51802",
        "[Bugfix] Fix NVIDIA DeepSeek V4 mHC warmup",
        "open",
        ("mhc",),
        "continues #47807: registers the NVIDIA mHC TileLang kernels with `JitWarmupRegistry` and "
        "derives keys from the runtime dispatch path, including the non-DeepGEMM pre-norm GEMM.",
        "same goal; coordinate before opening. This PR's key selection is checked against the "
        "keys vLLM's own call sites produce over a serving sweep (CPU audit) and measured on an "
        "H200 (0 compiles after warmup).",
    ),
    Related(
        "vllm-project/vllm#52941",
        "[Bugfix][Model][NVIDIA] Fix DeepSeek V4 mHC TileLang warmup",
        "closed",
        ("mhc",),
        "extends #51802 with a fixed list of 42 candidate token sizes.",
        "no candidate list: every token count from 1 to `max_num_batched_tokens` (and each "
        "capture size) is mapped to its compile key and each key compiles once.",
    ),
    Related(
        "vllm-project/vllm#50175",
        "[1/N][warmup][DSv4] Migrate generic MLA metadata and indexing kernels",
        "merged",
        ("sparse-mla", "registry"),
        "moves sparse-MLA metadata kernels, the top-k/SWA combination among them, to the "
        "compile-key warmup registry.",
        "on bases with the registry this series adds only what it still misses; it does not "
        "re-implement the registry.",
    ),
    Related(
        "vllm-project/vllm#50176",
        "[4/N][warmup][DSv4] Migrate common attention kernels",
        "merged",
        ("spec-decode", "registry"),
        "moves DeepSeek V4 common attention kernels, MTP input normalisation among them, to the "
        "compile-key contract.",
        "complementary: the spec-decode helper kernels it does not cover are the subject here.",
    ),
    Related(
        "vllm-project/vllm#50177",
        "part of the DSv4 registry migration (#49627 split)",
        "see upstream",
        ("registry",),
        "one of the PRs #49627 is split into (#50175, #53564, #53565, #50176, #53566, #50177, "
        "#53567, #50178); its description was not available when this body was generated.",
        "the submitter must read it before opening and state the difference here.",
    ),
    Related(
        "vllm-project/vllm#50178",
        "[9/N][warmup][DSv4] Migrate MHC TileLang kernels",
        "merged",
        ("mhc", "registry"),
        "moves the mHC TileLang kernels to kernel-owned `dispatch(...)` and warmup spaces.",
        "where the registry exists, mHC keys are taken from it; the selection here covers the "
        "keys its spaces leave out (measured: compiles after warmup).",
    ),
    Related(
        "vllm-project/vllm#56154",
        "[RFC][warmup] Derive Triton compile keys for migrated kernels",
        "open (RFC)",
        ("spec-decode", "registry"),
        "derives Triton compile keys from Triton's binder metadata and migrates the sampling and "
        "speculative-decoding kernels behind a decorator.",
        "overlaps with the spec-decode helper warmup; if it lands first, that PR should move onto "
        "its decorator instead of adding its own key functions.",
    ),
    Related(
        "vllm-project/vllm#56683",
        "[Perf] Parallelize mHC pre-norm JIT warmup",
        "merged",
        ("compile-pool",),
        "adds the `VllmJitKernel.compile_many()` hook and compiles DeepSeek V4.1's "
        "`MHCPreNormKernel` variants with TileLang's `par_compile()` (at most four workers per "
        "process); every other kernel keeps compiling its keys one after another.",
        "uses that hook for every `VllmTileLangJitKernel` (DeepSeek V4's mHC kernels, which "
        "#56683 leaves serial, among them): one pool across the registry's TileLang kernels, "
        "elaboration on the dispatching thread as in `par_compile()`, sized by "
        "`VLLM_TILELANG_JIT_WARMUP_NUM_THREADS` (default 4, #56683's cap).",
    ),
    Related(
        "sgl-project/sglang#28271",
        "shard DeepGEMM warmup across local GPUs",
        "closed (SGLang)",
        ("compile-sharing",),
        "splits DeepGEMM's warmup compiles between the GPUs of a node (each rank compiles a part "
        "into the shared cache, then the ranks synchronise).",
        "does the same for vLLM's JIT warmup registry (Triton and TileLang), per kernel and only "
        "between ranks that hold the same compile keys and write the same cache directory; a rank "
        "compiles whatever it does not find after the wait itself.",
    ),
    Related(
        "sgl-project/sglang#30255",
        "Fix DSV4 prefill large Triton recompilation idle across context lengths",
        "merged (SGLang)",
        ("c128a", "sparse-mla"),
        "passes the C128 metadata capacity and the combiner's top-k as runtime scalars, so a new "
        "context length no longer makes a new specialization (+26.75 % output throughput at "
        "concurrency 384 in its benchmark).",
        "the C128A fix here is about correctness (initialised buffers, bound checks); turning "
        "value-dependent arguments into runtime scalars is complementary and would shrink the key "
        "space the warmup has to cover.",
    ),
)


@dataclass
class CheckLine:
    """One command ``make pr`` ran (or could not run) for a PR."""

    name: str
    command: str
    status: str  # passed | failed | pre-existing | not run
    detail: str = ""


@dataclass
class BodyInput:
    base: str
    title: str
    branch: str
    slug: str
    numbers: list[str]  # the NNNN of the PR's patches
    messages: list[tuple[str, str]]  # (subject, body) of each of the PR's commits
    files: list[str]
    diff: str  # changed lines + overlay files: what the PR's code names
    identifiers: set[str]  # names its code defines and uses (AST): its topics
    depends: list[tuple[str, str, str, list[str]]]  # (number, title, branch, reasons)
    checks: list[CheckLine]
    not_applicable: list[str]  # hooks with no matching files
    submitter: str  # "Name <email>"
    coauthor: str
    tests: list[str] = field(default_factory=list)  # vLLM tests for the submitter to rerun
    touches_outputs: list[str] = field(default_factory=list)  # kernels / launchers changed
    upstream_base: bool = True


# --------------------------------------------------------------------------
# docs/gpu-results.md


def _sections(markdown: str) -> list[tuple[int, str, str]]:
    """(level, heading, text incl. heading) of every section."""
    lines = markdown.splitlines()
    heads = [
        (i, len(m.group(1)), m.group(2).strip())
        for i, line in enumerate(lines)
        if (m := re.match(r"^(#{1,6})\s+(.*)$", line))
    ]
    out = []
    for k, (i, level, title) in enumerate(heads):
        end = next((j for j, lv, _ in heads[k + 1 :] if lv <= level), len(lines))
        out.append((level, title, "\n".join(lines[i:end]).strip()))
    return out


def _norm(text: str) -> str:
    text = re.sub(r"^\s*(\[[^\]]*\]\s*)+", "", text)
    return " ".join(re.sub(r"[^a-z0-9]+", " ", text.lower()).split())


def results_base(markdown: str) -> str | None:
    """The vLLM release the figures were measured on (named in the intro)."""
    intro = markdown.split("\n## ", 1)[0]
    m = re.search(r"vLLM (\d+\.\d+\.\d+)", intro)
    return m.group(1) if m else None


def _heading_base(line: str, default: str | None) -> str | None:
    """The release a ``##`` section measured on: one its heading names, else
    the intro's."""
    m = re.search(r"vLLM (\d+\.\d+\.\d+)", line)
    return m.group(1) if m else default


@dataclass
class Measured:
    source: str
    base: str | None  # the intro's release (sections may name their own)
    rows: list[str]  # table rows (with the header) naming the PR's topics / kernels
    sections: list[tuple[str, str]]  # (heading, text) whose heading names the PR
    outputs: list[str]  # rows / lines saying outputs are unchanged / match references
    # the same rows / outputs measured on the PR's own base (a section naming it)
    own_rows: list[str] = field(default_factory=list)
    own_outputs: list[str] = field(default_factory=list)
    own_sections: list[tuple[str, str]] = field(default_factory=list)


def measured(
    results: Path,
    base: str,
    subjects: list[str],
    numbers: list[str],
    slug: str,
    diff: str,
    topics: set[str],
) -> Measured | None:
    if not results.is_file():
        return None
    text = results.read_text()
    measured_on = results_base(text)
    same_base = measured_on in (None, base)
    kernels = [k for k in KERNELS if re.search(rf"\b{re.escape(k)}\b", diff)]
    words = [w for t in topics for w in RESULT_WORDS.get(t, ())]

    def names_us(title: str, on_base: bool = same_base) -> bool:
        # Patch numbers and slugs name this PR only where measured on its base.
        low = title.lower()
        return bool(
            any(s and _norm(s) in _norm(title) for s in subjects)
            or (on_base and any(re.search(rf"\b(patch )?{n}\b", title) for n in numbers))
            or (on_base and slug in title)
            or any(k in title for k in kernels)
            or any(w in low for w in words)
        )

    sections: list[tuple[str, str]] = []
    own_sections: list[tuple[str, str]] = []
    for level, title, body in _sections(text):
        picked_bodies = [b for _, b in sections + own_sections]
        heading_base = _heading_base(title, measured_on)
        if (
            level >= 2
            and names_us(title, heading_base == base)
            and not any(body in b for b in picked_bodies)
        ):
            own = heading_base == base and heading_base != measured_on
            (own_sections if own else sections).append((title, body))
    rows: list[str] = []
    outputs: list[str] = []
    table: list[str] = []  # header (+ separator) of the table being read
    picked: list[str] = []  # its rows that name us

    own_rows: list[str] = []
    own_outputs: list[str] = []
    section_base = measured_on

    def row_release(first_cell: str) -> str | None:  # "0.33.0 steady state: ..."
        m = re.match(r"(?:vLLM )?(\d+\.\d+\.\d+)\b", first_cell)
        return m.group(1) if m else None

    def own(first_cell: str = "") -> bool:
        """The current section, or a row whose first cell names its release
        (in the status table), measured the PR's own base."""
        on = row_release(first_cell) or section_base
        return on == base and on != measured_on

    own_picked: list[str] = []  # rows of the table being read that name their release

    def close() -> None:
        for into, lines in ((own_rows if own() else rows, picked), (own_rows, own_picked)):
            if lines:
                into.extend([*([""] if into else []), *table, *lines])
        picked.clear()
        own_picked.clear()

    for line in [*text.splitlines(), ""]:
        if not line.startswith("|"):
            close()
            table = []
            if re.match(r"^##\s", line):
                section_base = _heading_base(line, measured_on)
            continue
        if not table or (len(table) == 1 and re.match(r"^\|[\s:|-]+\|$", line)):
            table.append(line)
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        first = cells[0] if cells else ""
        if row_release(first) not in (None, base):
            continue  # another release's row: neither this branch's nor the intro's
        if names_us(first) or any(k in line for k in kernels):
            (own_picked if own(first) and not own() else picked).append(line)
            if re.search(
                r"identical|unchanged|= ?reference|= torch|equal the (torch )?reference|match"
                r"|exactly the [^|]*pristine",
                line,
                re.I,
            ):
                (own_outputs if own(first) else outputs).append(line)
    section_base = measured_on
    for line in text.splitlines():
        if re.match(r"^##\s", line):
            section_base = _heading_base(line, measured_on)
        if (
            not line.startswith("|")
            and re.search(r"outputs? (identical|unchanged)|identical outputs", line, re.I)
            and (any(w in line.lower() for w in words) or any(k in line for k in kernels))
        ):
            (own_outputs if own() else outputs).append(line.strip())
    if not (rows or sections or own_rows or own_sections):
        return None
    try:
        source = str(results.relative_to(Path(__file__).resolve().parents[2]))
    except ValueError:
        source = results.name
    return Measured(
        source, measured_on, rows, sections, outputs, own_rows, own_outputs, own_sections
    )


def _demote(text: str, to: int) -> str:
    """Headings nest at level ``to`` and below."""
    levels = [len(m.group(1)) for m in re.finditer(r"^(#{1,6})\s", text, re.M)]
    if not levels:
        return text
    shift = to - min(levels)

    def repl(m: re.Match[str]) -> str:
        return "#" * min(6, max(to, len(m.group(1)) + shift)) + " "

    return re.sub(r"^(#{1,6})\s+", repl, text, flags=re.MULTILINE)


# --------------------------------------------------------------------------
# Blocks


def ai_statement(b: BodyInput) -> str:
    return (
        "**AI assistance was used** to write this change, its tests and this description "
        f"(commits carry `Co-authored-by: {b.coauthor}`). The human submitter is accountable for "
        "it: they must review every changed line, rerun the tests below and be able to defend "
        "the change end to end before opening this PR."
    )


def submitter_block(b: BodyInput) -> str:
    lines = [
        "### Submitter (to fill in before opening this PR)",
        "",
        "> The human submitter must review every changed line of this PR and rerun the tests "
        "(the commands under the Test Plan and the GPU tests listed here) before opening it, "
        "then replace each `<FILL IN: ...>` and delete this note.",
        "",
        f"- Submitter (commits signed off as): {b.submitter}",
        "- [ ] I reviewed every changed line and can explain and defend it: `<FILL IN: date>`",
        "- [ ] I reran the Test Plan commands; results: `<FILL IN: paste or link>`",
        "- [ ] Duplicate-work check (`gh issue view 48809 --repo vllm-project/vllm --comments`, "
        '`gh pr list --repo vllm-project/vllm --state open --search "48809 in:body"`, '
        '`gh pr list ... --search "<kernel names>"`) on `<FILL IN: date>`; '
        "anything new since the Related work below: `<FILL IN>`",
    ]
    if b.tests:
        lines.append(
            "- [ ] vLLM's tests for the changed modules, on a GPU (not run by the tool): "
            + ", ".join(f"`{t}`" for t in b.tests)
            + "; result: `<FILL IN>`"
        )
    if b.touches_outputs:
        lines.append(
            "- [ ] Model evaluation, since this changes a kernel or its launch path "
            f"({', '.join(f'`{k}`' for k in b.touches_outputs[:4])}): "
            "`<FILL IN: e.g. lm_eval gsm8k, DeepSeek-V4-Flash, before / after>`"
        )
    if version(b.base) >= (0, 33):
        lines.append(
            "- [ ] I ran vLLM's `/pr-checklist` skill and addressed its findings: `<FILL IN>`"
        )
    return "\n".join(lines)


def related_block(b: BodyInput, topics: set[str], level: int = 3) -> str:
    # The registry's own PRs concern a PR about the kernels it warms, not one
    # about how the registry compiles.
    registry = version(b.base) >= (0, 29) and not topics & {"compile-pool", "compile-sharing"}
    topics = set(topics) | ({"registry"} if registry else set())
    mine = [r for r in RELATED if set(r.topics) & topics]
    rest = [r for r in RELATED if r not in mine]
    head = "#" * level
    out = [
        f"{head} Related work (why this is not a duplicate)",
        "",
        f"Tracking issue: {ISSUE}. Upstream work on the same kernels, and how this PR differs:",
        "",
    ]
    for r in mine:
        out.append(f"- {r.ref} ({r.state}) *{r.title}*: {r.what} **This PR:** {r.differs}")
    if rest:
        out += ["", "<details><summary>Other related upstream work</summary>", ""]
        out += [f"- {r.ref} ({r.state}) *{r.title}*: {r.what}" for r in rest]
        out += ["", "</details>"]
    return "\n".join(out)


_STATUS = {
    "passed": "passed",
    "failed": "FAILED",
    "pre-existing": "fails on the pristine tag too; nothing new from this PR",
    "not run": "NOT run",
}


def _files_var(b: BodyInput) -> tuple[str, str]:
    """(``FILES=...`` line, the file list it stands for)."""
    joined = " ".join(b.files)
    return f'FILES="{joined}"', joined


def plan_block(b: BodyInput) -> str:
    ran = [c for c in b.checks if c.status != "not run"]
    skipped = [c for c in b.checks if c.status == "not run"]
    files_line, joined = _files_var(b)
    commands = [c.command.replace(joined, "$FILES") for c in ran]
    out = [
        f"Run by `make pr` (dsv4-warmup tooling) in a git copy of vLLM v{b.base} with this "
        "branch checked out, on the files this PR changes. Each hook is the one the tree's "
        "`.pre-commit-config.yaml` defines (stage `pre-commit`), run directly with its own "
        "arguments: pre-commit itself cannot fetch hook repositories there. Results under "
        "Test Result.",
        "",
        "```bash",
        *([files_line] if any("$FILES" in c for c in commands) else []),
        *commands,
        "```",
    ]
    if skipped:
        out += ["", "Not run (so not claimed):", ""]
        out += [f"- `{c.name}`: {c.detail}" for c in skipped]
    if b.not_applicable:
        out += [
            "",
            "Hooks with no matching files: " + ", ".join(f"`{h}`" for h in b.not_applicable),
        ]
    return "\n".join(out)


def _row_text(line: str) -> str:
    if not line.startswith("|"):
        return line.strip()
    return " | ".join(c.strip() for c in line.strip().strip("|").split("|"))


# "#15" in docs/gpu-results.md is this project's issue; on GitHub it would link
# to vllm-project/vllm#15. Upstream references are written owner/repo#N.
_PROJECT_REF = re.compile(r"(?<![\w/#&])#(\d{1,4})(?!\d)")


def without_project_refs(text: str) -> str:
    """``text`` with this project's issue references (``#15``) spelled out, so
    GitHub does not link them to vLLM's issues of the same number."""
    return _PROJECT_REF.sub(r"dsv4-warmup issue \1", text)


def result_block(b: BodyInput, m: Measured | None, level: int = 3) -> str:
    head = "#" * level
    out = ["| check | result |", "|---|---|"]
    for c in b.checks:
        status = _STATUS.get(c.status, c.status)
        if c.status == "not run":
            status += f": {c.detail}"
        elif c.detail:
            status += f" ({c.detail})"
        out.append(f"| `{c.name}` | {status} |")
    out += [""]
    if m is None:
        out.append(
            "GPU figures: not yet measured (no section or row of the results names this PR)."
        )
    else:
        if m.own_rows or m.own_sections:
            # The results file also holds CPU measurements: each table says which.
            out += [f"{head} Measured on this base (`{m.source}`, vLLM {b.base})", ""]
            out += [*m.own_rows, ""] if m.own_rows else []
            out += _details(m.own_sections, level)
        where = f"`{m.source}`" + (f", measured on the vLLM {m.base} series" if m.base else "")
        if m.rows or m.sections:
            out += [f"{head} Measured on GPU ({where})", ""]
        if m.base and m.base != b.base and (m.rows or m.sections):
            out += [
                f"> These figures come from the v{m.base} series of these patches (same kernels), "
                f"not from this v{b.base} branch: rerun them on this branch before opening.",
                "",
            ]
        if m.rows:
            out += [*m.rows, ""]
        out += _details(m.sections, level)
    if b.touches_outputs:
        out += [
            f"{head} Outputs on valid input",
            "",
            "This PR changes "
            + ", ".join(f"`{k}`" for k in b.touches_outputs)
            + " (a kernel or its launch path).",
        ]
        if m and (m.outputs or m.own_outputs):
            out += ["Measured evidence that outputs are unchanged on valid input:", ""]
            out += [f"- (v{b.base}) {_row_text(line)}" for line in m.own_outputs]
            other = f"(v{m.base} series) " if m.base and m.base != b.base else ""
            out += [f"- {other}{_row_text(line)}" for line in m.outputs]
        else:
            out.append(
                "**Not yet shown** that outputs are unchanged on valid input: measure it (and a "
                "model evaluation) before opening."
            )
    return without_project_refs("\n".join(out).rstrip())


def _details(sections: list[tuple[str, str]], level: int) -> list[str]:
    """Results sections, each folded under its heading."""
    out: list[str] = []
    for title, text in sections:
        out += [
            f"<details><summary>{title}</summary>",
            "",
            _demote(text, level + 1),
            "",
            "</details>",
            "",
        ]
    return out


def purpose_block(b: BodyInput) -> str:
    out: list[str] = []
    for subject, body in b.messages:
        if len(b.messages) > 1:
            out += [f"**{subject}**", ""]
        out += [body or subject, ""]
    if not any("48809" in body for _, body in b.messages):
        out += [
            f"Part of the fix for {ISSUE} (DeepSeek V4 JIT kernels compiled during inference).",
            "",
        ]
    if b.depends:
        out.append(
            f"**Depends on** {len(b.depends)} earlier PR(s) of this series; their commits are the "
            "first commits of this branch, so merge (or review) them first:"
        )
        for number, title, branch, reasons in b.depends:
            why = f": {'; '.join(reasons[:3])}" if reasons else ""
            out.append(f"- {number} {title} (branch `{branch}`){why}")
    else:
        out.append(f"**Depends on** nothing: applies on its own to vLLM v{b.base}.")
    out += ["", "Files:", *[f"- `{f}`" for f in b.files]]
    return "\n".join(out).rstrip()


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


def render(b: BodyInput, template: str, results: Path) -> str:
    topics = topics_of(b.identifiers, b.files)
    m = measured(results, b.base, [s for s, _ in b.messages], b.numbers, b.slug, b.diff, topics)
    heads = template_headings(template)
    if "Overview" in heads and "Validation" in heads:  # vLLM 0.27+
        claims = [f"- {s}" for s, _ in b.messages]
        if m and (m.rows or m.own_rows):
            claims.append(
                "- GPU measurements of the kernels this PR touches: see Validation (each "
                "table says which change and base it measured)."
            )
        if b.touches_outputs:
            if m and m.own_outputs:
                outputs = "measured on this base, see Validation."
            elif m and m.outputs:
                outputs = (
                    f"measured on the v{m.base} series (same kernels), not yet on this "
                    "branch: see Validation."
                )
            else:
                outputs = "NOT yet shown."
            claims.append("- Outputs unchanged on valid input: " + outputs)
        sections = {
            "Overview": "\n\n".join([f"{b.title}. Part of {ISSUE}.", ai_statement(b)]),
            "Claims": "\n".join(claims),
            "Validation": "\n\n".join(
                ["### Test Plan", plan_block(b), "### Test Result", result_block(b, m, level=4)]
            ),
            "Details": "\n\n".join(
                [purpose_block(b), related_block(b, topics), submitter_block(b)]
            ),
        }
    else:
        sections = {
            "Purpose": "\n\n".join(
                [
                    ai_statement(b),
                    purpose_block(b),
                    related_block(b, topics),
                    submitter_block(b),
                ]
            ),
            "Test Plan": plan_block(b),
            "Test Result": result_block(b, m),
        }
    filled = fill_template(template, sections)
    head = f"<!-- title: {b.title} | branch: {b.branch} | base: v{b.base} -->\n"
    if filled.startswith("<!-- markdownlint-disable -->\n"):
        return filled.replace(
            "<!-- markdownlint-disable -->\n", "<!-- markdownlint-disable -->\n" + head, 1
        )
    return head + filled


def version(base: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", base)[:3])
