"""The documentation is a manual: README, docs/, the sample READMEs and every --help text describe the product as it
is (no project history), benchmark figures live on the generated benchmark pages only, and the generated pages
(command-line reference, API, benchmarks) cover what they say they cover."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from tests.scripts import script_module

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").rglob("*.md"))
MANUAL = [README, *PAGES, *sorted((ROOT / "samples").glob("*/README.md"))]

# Phrases that tell the project's history rather than describe the product: which run, session or attempt measured
# what, what a default or a name used to be, which target was met, dates of runs. Each is matched case-insensitively.
HISTORY = {
    "a session": r"\bsessions?\b",
    "a lease": r"\bleases?\b",
    "used to": r"\bused to\b",
    "a former default": r"\b(was|were) the defaults?\b",
    "old or new versus now": r"\b(old|older|previous|former|new|newer) (defaults?|names?|placements?|behaviou?rs?|"
    r"versions?|ways?|paths?|clients?)\b",
    "previously": r"\bpreviously\b",
    "formerly": r"\bformerly\b",
    "no longer": r"\bno longer\b",
    "any more": r"\bany ?more\b",
    "a target met": r"\btargets?\b[^;\n]{0,40}\b(met|missed)\b|\b(is|was|were|not|been) met\b",
    "git history": r"\bgit history\b|\bgit remembers\b",
    "an earlier run": r"\b(earlier|later|last|previous|next) (runs?|sessions?|commits?|measurements?|leases?)\b|"
    r"\bearlier (calls?|ratios?|figures?|results?|baselines?|placements?|defaults?)\b",
    "default since": r"\bdefault( \w+)? since\b|\bwas meant to\b|\bdid not help\b",
    "call N": r"\bcalls? \d+\b",
    "a date": r"\b20\d\d-[01]\d-[0-3]\d\b",
    "an attempt": r"\battempts?\b",
    "a commit": r"\bcommits? [0-9a-f]{7,}\b",
    "until now": r"\buntil (now|recently)\b|\brecently\b|\bsince then\b",
    "is now": r"\b(is|are|was|were) now\b|\bnow (refuses|uses|takes|runs|has|have|gives|writes|keeps|reads)\b",
    "an issue number": r"\bissue #?\d+\b",
    "we did": r"\bwe (measured|found|tried|changed|removed|added)\b",
    "an experiment": r"\bexperiments?\b",
    "a change": r"\b(before|after) (this|the) change\b",
    "removed": r"\b(has|have) (been|since been) (removed|replaced|renamed|dropped)\b|"
    r"\b(was|were) (removed|renamed|dropped|replaced|added|changed)\b",
    "fixed in": r"\bfixed in\b",
    "what is left": r"\bwhat is left\b",
    "an ordinal run": r"\bin the (first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth)"
    r" (run|call|session|lease|attempt)\b",
}
PATTERNS = {name: re.compile(pattern, re.IGNORECASE) for name, pattern in HISTORY.items()}

# A measured figure: a time, a rate or a speed-up. These belong on the generated benchmark pages.
FIGURE = re.compile(
    r"\b\d[\d .,]*\s?(ms|µs|us|images/s|img/s|frames/s|requests/s|fps)\b|\b\d+(\.\d+)?\s?×", re.IGNORECASE
)


def history_in(text: str, skip=()) -> list:
    """``["line N: [match] (rule) line"]`` for every history phrase of ``text``."""
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        for name, pattern in PATTERNS.items():
            if name not in skip:
                found += [f"line {n}: [{m.group(0)}] ({name}) {line.strip()}" for m in pattern.finditer(line)]
    return found


@pytest.fixture(scope="module")
def reference():
    with script_module("scripts", "docs_reference") as module:
        yield module


@pytest.fixture(scope="module")
def benchmarks():
    with script_module("scripts", "docs_benchmarks") as module:
        yield module


@pytest.mark.parametrize("path", MANUAL, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_manual_tells_no_history(path):
    assert history_in(path.read_text()) == []


@pytest.mark.parametrize(
    "text, rule",
    [
        ("the sixth session measured it", "a session"),
        ("the default used to be 4", "used to"),
        ("MSE is the new default", "old or new versus now"),
        ("target 1.15×: met", "a target met"),
        ("measured on 2026-12-01", "a date"),
        ("in call 3 of the lease", "call N"),
        ("the build now refuses it", "is now"),
        ("earlier runs are in git history", "an earlier run"),
        ("the default placement since", "default since"),
    ],
)
def test_the_phrase_list_catches_history(text, rule):
    assert any(f"({rule})" in hit for hit in history_in(text))


def parsers(reference) -> dict:
    """``{"trtkit build": its parser, ...}``: the top-level parser, every command, every nested command."""
    from trtkit.cli import main

    found = {"trtkit": main.make_parser()}

    def walk(parser):
        found[parser.prog] = parser
        for _name, _help, sub in reference.subcommands(parser):
            walk(sub)

    for name in main.COMMANDS:
        walk(dict((n, p) for n, _h, p in reference.subcommands(main.make_parser(name)))[name])
    return found


def help_texts(reference) -> dict:
    """``{"trtkit build": its --help, ...}``, each option's help on one line (no wrapping)."""
    texts = {}
    for prog, parser in parsers(reference).items():
        parser.formatter_class = lambda prog: argparse.HelpFormatter(prog, width=100_000)
        texts[prog] = parser.format_help()
    return texts


def test_every_help_text_tells_no_history(reference):
    texts = help_texts(reference)
    assert {"trtkit build", "trtkit eval detection", "trtkit export triton"} <= set(texts)
    found = {prog: history_in(text) for prog, text in texts.items()}
    found = {prog: hits for prog, hits in found.items() if hits}
    assert found == {}


def test_generated_pages_tell_no_history(reference, benchmarks):
    for path, text in reference.cli_pages().items():
        assert history_in(text) == [] or all("--use-profile" in h for h in history_in(text)), path
    # a benchmark table names the date of its run: that is its provenance
    for path, text in benchmarks.pages().items():
        assert history_in(text, skip={"a date"}) == [], path


@pytest.mark.parametrize("path", MANUAL, ids=lambda p: str(p.relative_to(ROOT)))
def test_figures_live_on_the_benchmark_pages_only(path):
    figures = [
        f"line {n}: {line.strip()}" for n, line in enumerate(path.read_text().splitlines(), 1) if FIGURE.search(line)
    ]
    assert figures == []


@pytest.mark.parametrize(
    "text, figure",
    [
        ("0.62 ms a call", True),
        ("1.18× FP16", True),
        ("14 109 images/s at batch 8", True),
        ("NVDEC 146 fps", True),
        ("from 1 MiB", False),
        ("at most 8 arrays of 64 KiB", False),
        ("`--max-wait-ms 5`", False),
    ],
)
def test_the_figure_pattern_tells_figures_from_sizes(text, figure):
    assert bool(FIGURE.search(text)) is figure


def test_the_readme_is_a_front_page():
    lines = README.read_text().splitlines()
    assert len(lines) <= 150
    commands = [line.strip() for line in lines if line.startswith("    ")]
    assert (
        'pip install -e ".[dev]"                             # CPU only: build nothing, test everything on fakes'
        in commands
    )
    assert "trtkit demo" in commands and "pytest" in commands  # the two set-up commands of a fresh machine
    start = lines.index("## Quick start")
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("## "))
    assert end - start <= 40
    for guide in re.findall(r"\]\((docs/[^)#]+)", "\n".join(lines)):
        assert (ROOT / guide).is_file(), guide


def test_the_cli_reference_has_every_option_of_every_command(reference):
    from trtkit.cli import main

    pages = reference.cli_pages()
    assert set(pages) == {"reference/cli/index.md", *(f"reference/cli/{name}.md" for name in main.COMMANDS)}
    for prog, parser in parsers(reference).items():
        page = pages["reference/cli/index.md" if prog == "trtkit" else f"reference/cli/{prog.split()[1]}.md"]
        parser.formatter_class = reference._formatter
        assert f"```text\n{parser.format_usage().strip()}\n```" in page, prog
        for action in parser._actions:
            for option in action.option_strings:
                assert f"`{option}" in page or f", {option}" in page, (prog, option)
    assert "## trtkit eval detection" in pages["reference/cli/eval.md"]


def test_the_api_reference_documents_every_public_name(reference):
    import trtkit

    text = "\n".join(reference.api_pages().values())
    for name in trtkit.__all__:
        if not name.startswith("_") and name != "build_engine":  # build_engine: the alias of build
            assert re.search(rf"^::: [\w.]+\.{name}$", text, re.MULTILINE), name


def write_results(folder: Path, files: dict) -> Path:
    folder.mkdir()
    for name, data in files.items():
        (folder / name).write_text(json.dumps(data))
    return folder


def test_benchmark_tables_name_gpu_tensorrt_date_and_command(benchmarks):
    pages = benchmarks.pages()
    provenance = re.compile(r"^\*GPU: .+ · TensorRT: .+ · date: .+ · command: .+\*$", re.MULTILINE)
    tables = 0
    for path, text in pages.items():
        # a section of a page (from one heading to the next) that holds a table ends with the table's provenance
        for section in re.split(r"^#+ ", text, flags=re.MULTILINE):
            if "|---" in section and not section.startswith("Runs"):
                tables += section.count("|---")
                assert provenance.search(section[section.rindex("|---") :]), (path, section[:80])
    assert tables > 10
    assert "NVIDIA H200" in pages["benchmarks/runner.md"]


def test_benchmark_pages_say_what_a_file_does_not_record(benchmarks, tmp_path):
    results = write_results(
        tmp_path / "results",
        {
            "runner-x.json": {"batches": [1], "1": {"floor_ms": 0.5, "trtkit_graph_ms": 0.52}},
            "build-overhead-x.json": {
                "models": {"m": {"raw_s": 1.0, "trtkit_s": 1.1, "ratio": 1.1}},
                "tensorrt": "10.8.0",
                "date": "2026-01-02 03:04:05 UTC",
                "command": "python benchmarks/build_overhead.py --resnet50 r.onnx",
            },
        },
    )
    pages = benchmarks.pages(results)
    assert (
        "*GPU: not recorded · TensorRT: not recorded · date: not recorded · command: not recorded (the file is "
        "written by `python benchmarks/runner_vs_anchors.py`)*" in pages["benchmarks/runner.md"]
    )
    assert (
        "*GPU: not recorded · TensorRT: 10.8.0 · date: 2026-01-02 03:04 UTC · command: `python "
        "benchmarks/build_overhead.py --resnet50 r.onnx`*" in pages["benchmarks/build-overhead.md"]
    )


def test_benchmark_pages_stand_without_their_files(benchmarks, tmp_path):
    results = write_results(
        tmp_path / "results",
        {
            "serve-x-check.json": {"gpu": "G"},
            "grpc-client-cost-cpu.json": {"runs": {}},
            "mystery-x.json": {"gpu": "G", "tensorrt": "8.6.0", "speed": 3.5, "inner": {"depth": 2}},
        },
    )
    pages = benchmarks.pages(results)
    # every kind keeps its page (links to it hold); partial re-runs and skipped files get none
    assert {f"benchmarks/{k.prefix}.md" for k in benchmarks.KINDS} <= set(pages)
    assert "No results file of this benchmark is present" in pages["benchmarks/serve.md"]
    assert not any("check" in path or "grpc" in path for path in pages)
    # a file no renderer knows shows what it records
    assert "| `speed` | 3.5 |" in pages["benchmarks/mystery-x.md"]
    assert "| `inner.depth` | 2 |" in pages["benchmarks/mystery-x.md"]
    assert "(mystery-x.md)" in pages["benchmarks/index.md"]
