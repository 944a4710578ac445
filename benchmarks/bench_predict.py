#!/usr/bin/env python
"""Benchmark: `trn-tutorials predict` on the emotion test split and on a 100,000-text file made from its train split.

The model is the predict chapter's: a tiny BERT (two layers, the bundled sample's words) fine-tuned on the bundled
sample, in `--out` (or any trained folder given with `--model`). Each run is the real command in a child process, its
output file new: texts/s from the command's own summary line (classifying only, model loading not counted), the wall
time of the whole command, and the peak RSS of the command's process.

    .venv/bin/python benchmarks/bench_predict.py --data ../shared/data/emotion --out /tmp/bench-predict

Writes `results.json` in `--out` and prints it. The emotion data is licensed for research and education: it is read
from where it lies; the 100,000-text file is written in `--out`, never in this repository.
"""
import argparse, json, os, platform, re, subprocess, sys, time
from pathlib import Path

PROBE = ('import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True); '
         'sys.stderr.write(r.stderr); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(r.returncode)')


def tiny_model(out: Path) -> str:
    "The predict chapter's model: a tiny BERT fine-tuned for 10 epochs on the bundled sample (about a minute on a CPU)."
    from trn_tutorials.training.arguments import TrainArguments
    from trn_tutorials.data.sources import DataArguments
    from trn_tutorials.data.prepare import prepare
    from trn_tutorials.data.files import EMOTION_LABELS
    from trn_tutorials.data.sources import load_raw, sample_data
    from trn_tutorials.training.launch import launch
    from trn_tutorials.models import tiny_bert
    if (out/'model'/'model.safetensors').exists(): return str(out/'model')
    words = sorted({w for split in load_raw(sample_data()).values() for t in split['text'] for w in t.split()})
    prepare(DataArguments(data=sample_data(), model_id=tiny_bert(out/'tiny-bert', words, labels=EMOTION_LABELS),
                          dataset_path=str(out/'data'), buckets=3))
    launch(TrainArguments(dataset_path=str(out/'data'), output_dir=str(out/'model'), num_train_epochs=10, learning_rate=3e-3,
                          per_device_train_batch_size=16), echo=False)
    return str(out/'model')


def many(train: Path, n: int, dest: Path) -> Path:
    "`n` texts: the lines of `train` repeated, in emotion's `text;label` form."
    lines = [l for l in train.read_text().splitlines() if l.strip()]
    dest.write_text('\n'.join((lines * (n // len(lines) + 1))[:n]) + '\n')
    return dest


def predict(model: str, data: Path, output: Path, *extra: str, threads: int = 1, repeats: int = 2) -> dict:
    "`trn-tutorials predict` `repeats` times, each in a child that reports the peak RSS of the command: the fastest run's summary, wall time and peak, and every run's texts/s."
    runs = [predict_once(model, data, output, *extra, threads=threads) for _ in range(repeats)]
    best = max(runs, key=lambda r: r['texts_per_s'])
    return {**best, 'texts_per_s_each_run': [r['texts_per_s'] for r in runs], 'peak_rss_mb': max(r['peak_rss_mb'] for r in runs)}


def predict_once(model: str, data: Path, output: Path, *extra: str, threads: int = 1) -> dict:
    "One `trn-tutorials predict` in a child that reports the peak RSS of the command; its summary, wall time and peak."
    for f in (output, Path(f'{output}.record.json')): f.unlink(missing_ok=True)
    cmd = [str(Path(sys.executable).parent/'trn-tutorials'), 'predict', '--model_dir', model, '--data', str(data), '--output', str(output), *extra]
    t0 = time.time()
    r = subprocess.run([sys.executable, '-c', PROBE, *cmd], capture_output=True, text=True, env={**os.environ, 'OMP_NUM_THREADS': str(threads)})
    if r.returncode: sys.exit(f"predict failed: {r.stderr[-2000:]}")
    said = r.stderr.strip().splitlines()[-1]
    m = re.search(r'classified (\d+) texts .* in ([\d.]+) s, (\d+) texts/s, batches of (\d+); (?:(\d+) longer|none)', said)
    rows = output.read_text().count('\n') - output.suffix.endswith('csv')
    return {'command': ' '.join(['trn-tutorials', *cmd[1:]]).replace(str(data.parent), 'DATA').replace(model, 'MODEL'),
            'texts': int(m[1]), 'rows_written': rows, 'classify_s': float(m[2]), 'texts_per_s': int(m[3]), 'batch_size': int(m[4]),
            'longer_than_trained': int(m[5] or 0), 'wall_s': round(time.time() - t0, 1), 'peak_rss_mb': round(int(r.stdout.split()[-1]) / 1024),
            'summary': said}


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--data', required=True, help='the emotion folder: test.txt and train.txt')
    p.add_argument('--out', default='/tmp/bench-predict', help='where the model, the 100,000-text file, the outputs and results.json go')
    p.add_argument('--model', help='a trained model folder; default: the predict chapter\'s tiny model, trained in --out')
    p.add_argument('--rows', type=int, default=100_000, help='texts in the big file')
    p.add_argument('--threads', type=int, default=1, help="PyTorch's CPU threads (OMP_NUM_THREADS) in the command")
    p.add_argument('--repeats', type=int, default=2, help='runs of each setting: the fastest is reported (a shared machine is noisy)')
    a = p.parse_args()
    out, data = Path(a.out), Path(a.data)
    out.mkdir(parents=True, exist_ok=True)
    model = a.model or tiny_model(out)
    big = many(data/'train.txt', a.rows, out/f'emotion-{a.rows}.txt')
    import torch, transformers
    from trn_tutorials.backends import detect
    kw = dict(threads=a.threads, repeats=a.repeats)
    res = {'date': time.strftime('%Y-%m-%d'), 'machine': f"{platform.machine()}, {os.cpu_count()} CPU cores, {detect().detail}",
           'versions': {'torch': torch.__version__, 'transformers': transformers.__version__}, 'model': 'tiny BERT (the predict chapter\'s)' if not a.model else a.model,
           'threads': a.threads, 'repeats': a.repeats, 'runs': {}}
    res['runs']['test split, jsonl'] = predict(model, data/'test.txt', out/'test.jsonl', **kw)
    res['runs']['test split, csv, --truncate'] = predict(model, data/'test.txt', out/'test-truncate.csv', '--truncate', **kw)
    res['runs'][f'{a.rows} texts, jsonl'] = predict(model, big, out/'big.jsonl', **kw)
    res['runs'][f'{a.rows} texts, csv'] = predict(model, big, out/'big.csv', **kw)
    (out/'results.json').write_text(json.dumps(res, indent=1))
    print(json.dumps(res, indent=1))


if __name__ == '__main__':
    main()
