"tools/preview_site.py: the HTML preview of the site where Quarto cannot run (pages beside the sidebar of nbs/sidebar.yml)."
import importlib.util, json, sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location('preview_site', ROOT / 'tools' / 'preview_site.py')
preview = importlib.util.module_from_spec(spec); spec.loader.exec_module(preview)


def test_sidebar_sections_in_order():
    secs = preview.sidebar()
    raw = yaml.safe_load((ROOT / 'nbs' / 'sidebar.yml').read_text())['website']['sidebar']['contents']
    assert [s for s, _ in secs[1:]] == [i['section'] for i in raw if isinstance(i, dict)]
    assert secs[0] == (None, ['index.ipynb'])


def test_page_names_drop_the_number_as_nbdev_does():
    assert preview.page_name('training/05b_precompile.ipynb') == 'training/precompile.html'
    assert preview.page_name('index.ipynb') == 'index.html'


def test_renders_a_section_with_titles_from_front_matter(tmp_path):
    proc = tmp_path / 'proc'
    for _, nbs in preview.sidebar():   # stand-in for _proc: each notebook with the front matter nbdev's preprocessing adds
        for nb in nbs:
            d = json.loads((ROOT / 'nbs' / nb).read_text())
            d['cells'].insert(0, {'cell_type': 'raw', 'id': 'front', 'metadata': {}, 'source': f'---\ntitle: "T {nb}"\ndescription: d\n---'})
            (proc / nb).parent.mkdir(parents=True, exist_ok=True); (proc / nb).write_text(json.dumps(d))
    pages = preview.render(proc, tmp_path / 'out', ['instance/06_cleanup.ipynb'])
    assert [p.relative_to(tmp_path / 'out').as_posix() for p in pages] == ['instance/cleanup.html']
    page = pages[0].read_text()
    assert 'T instance/06_cleanup.ipynb' in page and 'How it works: the instance' in page and 'class=here' in page
    assert '../training/launch.html' in page   # links relative to the page's folder
