"""An HTML preview of the docs site where Quarto cannot run: the notebooks nbdev's doc preprocessing made (`_proc/`,
left by `STAGES=docs make test`), turned into pages by nbconvert, each beside the sidebar that `nbs/sidebar.yml` gives
Quarto, in its sections and order.

    STAGES=docs make test                                      # _proc/: nbdev's preprocessing, on a clean copy
    .venv/bin/python tools/preview_site.py                     # every page, into _preview/
    .venv/bin/python tools/preview_site.py index.ipynb training   # the index and the training folder only
    chromium --headless --no-sandbox --screenshot=index.png --window-size=1280,2000 _preview/index.html

It is not the site: Quarto (which nbdev_docs runs after the preprocessing) is downloaded from GitHub, which this
machine cannot reach. It shows what the preprocessing left on each page (which cells show, which are hidden, the
`show_doc` of each exported name) and the sidebar's sections; Quarto's theme, search and cross-page link checks are
not in it.
"""
import argparse, html, re, sys
from pathlib import Path

import yaml
from nbconvert import HTMLExporter
from nbformat import read
from nbformat.v4 import new_markdown_cell

ROOT = Path(__file__).resolve().parent.parent
STYLE = """<style>
body{margin:0;font-family:system-ui,sans-serif} .side{position:fixed;top:0;left:0;bottom:0;width:250px;overflow:auto;
padding:12px 16px;background:#f6f7f9;border-right:1px solid #ddd;font-size:14px} .side h4{margin:14px 0 4px;font-size:13px;
text-transform:uppercase;color:#555} .side a{display:block;padding:2px 0;color:#2c3e50;text-decoration:none}
.side a.here{font-weight:700;color:#0d6efd} .page{margin-left:290px}
</style>"""


def sidebar(path=ROOT / 'nbs' / 'sidebar.yml') -> list[tuple[str | None, list[str]]]:
    "The sidebar's sections, in order: `(title, notebooks)`; the pages before the first section have the title `None`."
    out = [(None, [])]
    for item in yaml.safe_load(Path(path).read_text())['website']['sidebar']['contents']:
        if isinstance(item, str): out[0][1].append(item)
        else: out.append((item['section'], list(item['contents'])))
    return out


def front_matter(nb) -> dict:
    "The page's front matter (title, description), which nbdev's preprocessing makes from the first heading and quote."
    for c in nb.cells:
        if c.cell_type == 'raw' and c.source.startswith('---'): return yaml.safe_load(c.source.strip().strip('-')) or {}
    return {}


def title(nb) -> str: return front_matter(nb).get('title', '(untitled)')


def with_heading(nb):
    "The notebook with its front matter shown as Quarto shows it: the title as a heading, the description under it."
    fm = front_matter(nb)
    nb.cells = [c for c in nb.cells if not (c.cell_type == 'raw' and c.source.startswith('---'))]
    if fm: nb.cells.insert(0, new_markdown_cell(f"# {fm.get('title', '')}\n\n*{fm.get('description', '')}*"))
    return nb


def page_name(nb_path: str) -> str:
    "The page a notebook becomes, as nbdev names it: the number prefix dropped, `.html`."
    p = Path(nb_path)
    return str(p.with_name(re.sub(r'^\d+[a-z]?_', '', p.stem) + '.html'))


def render(proc: Path, out: Path, wanted: list[str]) -> list[Path]:
    "Write each wanted page (a notebook path or a section folder name; all when empty) into `out`; return them."
    sections = sidebar()
    titles = {nb: title(read(proc / nb, as_version=4)) for _, nbs in sections for nb in nbs if (proc / nb).exists()}
    exporter = HTMLExporter(template_name='lab')
    exporter.exclude_input_prompt = exporter.exclude_output_prompt = True
    done = []
    for _, nbs in sections:
        for nb in nbs:
            if wanted and nb not in wanted and Path(nb).parent.name not in wanted: continue
            if not (proc / nb).exists(): sys.exit(f"{proc / nb} is missing: run `STAGES=docs make test` first, which makes _proc/")
            depth = '../' * (len(Path(nb).parts) - 1)
            links = []
            for sec, items in sections:
                if sec: links.append(f'<h4>{html.escape(sec)}</h4>')
                links += [f'<a href="{depth}{page_name(i)}"{" class=here" if i == nb else ""}>{html.escape(titles.get(i, i))}</a>' for i in items]
            body, _ = exporter.from_notebook_node(with_heading(read(proc / nb, as_version=4)))
            body = body.replace('<body', f'<body><nav class="side">{"".join(links)}</nav><div class="page"', 1).replace('</body>', '</div></body>', 1)
            body = body.replace('</head>', STYLE + '</head>', 1)
            dest = out / page_name(nb)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(body)
            done.append(dest)
    return done


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('pages', nargs='*', help="notebooks (as in sidebar.yml) or section folders (e.g. train); default: all")
    p.add_argument('--proc', default=str(ROOT / '_proc'), help="the preprocessed notebooks' folder (nbdev's _proc)")
    p.add_argument('--out', default=str(ROOT / '_preview'), help='where the HTML pages go')
    a = p.parse_args(argv)
    proc = Path(a.proc)
    if not proc.is_dir(): sys.exit(f"{proc} does not exist: run `STAGES=docs make test` first, which makes it")
    for f in render(proc, Path(a.out), a.pages): print(f.relative_to(Path(a.out)))


if __name__ == '__main__': main()
