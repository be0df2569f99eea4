"""mkdocs hooks (``hooks:`` in mkdocs.yml): the generated pages join the site while it builds.

The command-line and API reference come from ``docs_reference`` (the argparse parsers, the packages' exports), the
benchmark pages from ``docs_benchmarks`` (``benchmarks/results/*.json``). None of them is a file in docs/: nothing
generated is committed, so nothing can go stale. Their navigation sections replace the entries of mkdocs.yml's
``nav`` that point at each section's index page.
"""

from __future__ import annotations

import docs_benchmarks  # scripts/ is on sys.path while mkdocs loads this hook
import docs_reference
from mkdocs.structure.files import File

_PAGES: dict = {}


def _titled(pages: dict, index: str, title) -> list:
    return [index] + [{title(path, text): path} for path, text in pages.items() if path != index]


def _first_heading(_path: str, text: str) -> str:
    return text.split("\n", 1)[0].lstrip("# ").strip()


def on_config(config):
    cli, api = docs_reference.cli_pages(), docs_reference.api_pages()
    bench = docs_benchmarks.pages()
    _PAGES.clear()
    _PAGES.update({**cli, **api, **bench})
    sections = {
        "reference/cli/index.md": _titled(cli, "reference/cli/index.md", _first_heading),
        "reference/api/index.md": _titled(api, "reference/api/index.md", _first_heading),
        "benchmarks/index.md": _titled(bench, "benchmarks/index.md", _first_heading),
    }
    config["nav"] = _expand(config["nav"], sections)
    return config


def _expand(nav, sections):
    """``nav`` with every ``{title: index}`` of a generated section turned into ``{title: [index, pages...]}``."""
    out = []
    for item in nav:
        if isinstance(item, dict):
            ((title, value),) = item.items()
            if isinstance(value, str) and value in sections:
                out.append({title: sections[value]})
            elif isinstance(value, list):
                out.append({title: _expand(value, sections)})
            else:
                out.append(item)
        else:
            out.append(item)
    return out


def on_files(files, config):
    for path, text in _PAGES.items():
        files.append(File.generated(config, path, content=text))
    return files
