"""The benchmark scripts run end to end on the bundled sample and a tiny BERT, each script once in its own process, and
write only where `--results` and `--out` say: every setting measured, the ratios the docs page reads, the repo's
results.json untouched. Their refusals and reruns that train nothing call the script's `main` in this process: a
refusal is one line, and needs no process of its own. (The numbers on the page come from the real data and MiniLM; here
only the plumbing is checked.)"""
import hashlib, importlib, json, os, shutil, subprocess, sys
from pathlib import Path

import pytest
from local_services import one_line
from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

from trn_tutorials.data.sources import sample_data
from trn_tutorials.data.prepared import load_prepared

ROOT = Path(__file__).parent.parent
SETTINGS = ['recipe (512)', 'recipe (128)', 'chosen', 'recipe (chosen length)', '2 buckets', 'packed']


@pytest.fixture(scope='module')
def tiny(prepared, tmp_path_factory):
    "A copy of the shared tiny BERT with 512 positions."
    tmp = tmp_path_factory.mktemp('bench')
    path = str(shutil.copytree(prepared/'tiny-bert', tmp/'tiny-bert'))
    # the recipe pads to the tokenizer's maximum, 512 for MiniLM: give the tiny model 512 positions and that maximum
    BertTokenizerFast.from_pretrained(path, model_max_length=512).save_pretrained(path)
    cfg = BertConfig.from_pretrained(path); cfg.max_position_embeddings = 512
    BertForSequenceClassification(cfg).save_pretrained(path)
    return tmp, path


# every invocation's processes (the scripts, torchrun's workers, the recipe's) on one thread each: a tiny model's ops are
# too small to share between threads, and on a shared machine two threads wait for each other (what is checked is the
# plumbing, not the speed)
ENV = os.environ | {'PYTHONPATH': str(ROOT), 'OMP_NUM_THREADS': '1', 'HF_HUB_OFFLINE': '1', 'HF_DATASETS_OFFLINE': '1'}


def digest(p: Path) -> str: return hashlib.sha256(p.read_bytes()).hexdigest()


def bench(monkeypatch, name: str):
    "The benchmark script `name` of benchmarks/ as a module, to call its functions in this process."
    monkeypatch.syspath_prepend(str(ROOT/'benchmarks'))
    return importlib.import_module(name)


def main_here(module, argv: list[str]):
    "`module.main(argv)` in this process, datasets' progress bars left as they were (the scripts turn them off)."
    import datasets
    bars = datasets.is_progress_bar_enabled()
    try: return module.main(argv)
    finally:
        if bars: datasets.enable_progress_bars()


def test_bench_recipe_runs_every_setting_in_one_invocation(tiny):
    "One invocation, under bf16 (the code fp32 runs, with the Trainer's bf16 set and the key named for it)."
    tmp, model = tiny
    bf16 = True
    repo_results, before = ROOT/'benchmarks'/'results.json', digest(ROOT/'benchmarks'/'results.json')
    out, results = tmp/'out-recipe', tmp/'results-recipe.json'
    cmd = [sys.executable, str(ROOT/'benchmarks'/'bench_recipe.py'), '--data', str(sample_data()), '--model', str(model),
           '--steps', '2', '--out', str(out), '--results', str(results), *(['--bf16'] if bf16 else [])]
    r = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    key = 'recipe_bf16' if bf16 else 'recipe'
    res = json.loads(results.read_text())
    assert list(res) == [key]   # only its own key
    rc = res[key]
    assert list(rc['settings']) == SETTINGS
    assert rc['hyperparameters'] == {'batch_size': 16, 'learning_rate': 5e-05, 'steps': 2, 'bf16': bf16}
    for n, row in rc['settings'].items():
        assert row['steps'] == 2 and row['samples_per_s'] > 0, (n, row)
    assert rc['settings']['recipe (512)']['lengths'] == [512] and rc['settings']['recipe (128)']['lengths'] == [128]
    assert rc['settings']['recipe (chosen length)']['lengths'] == rc['settings']['chosen']['lengths']   # the same padded tokens
    assert rc['chosen_vs_recipe_same_length'] == pytest.approx(rc['settings']['chosen']['samples_per_s'] /
                                                               rc['settings']['recipe (chosen length)']['samples_per_s'])
    p = rc['settings']['packed']
    assert p['texts_per_row'] > 1 and len(p['input_shapes']) == 1   # several texts a row, one shape
    for n in ('chosen', '2 buckets', 'packed'):
        assert rc['settings'][n]['eval_samples_per_s'] > 0, n   # the project's runs also time their evaluation
        assert rc['speedup_vs_recipe'][n] == pytest.approx(rc['settings'][n]['samples_per_s'] / rc['settings']['recipe (512)']['samples_per_s'])
    assert str(tmp) not in json.dumps(rc['settings'])   # the commands name <out> and <minilm>, not this machine's paths
    assert digest(repo_results) == before


def test_bench_step_times_every_variant_and_what_it_ran(tiny):
    "bench_step: the plain Trainer and the project's variants (packed rows too), each in its own torchrun worker, with the optimizer and DDP each says."
    tmp, model = tiny
    before, results = digest(ROOT/'benchmarks'/'results.json'), tmp/'results-step.json'
    cmd = [sys.executable, str(ROOT/'benchmarks'/'bench_step.py'), '--data', str(sample_data()), '--model', str(model),
           '--steps', '6', '--rounds', '1', '--no_warmup', '--out', str(tmp/'out-step'), '--results', str(results)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(results.read_text())
    assert list(res) == ['step']
    runs = {v: rs[0] for v, rs in res['step']['runs'].items()}
    assert list(runs) == ['Trainer', 'project', 'project, unfused AdamW', 'project, DDP', 'Trainer, 128 tokens', 'project, packed',
                          'project, packed, DDP']
    # one fp32 worker on this CPU: the train script's arguments leave out use_cpu, so only the DDP variants are wrapped
    assert [(r['optim'], r['ddp']) for r in runs.values()] == [('adamw_torch_fused', False), ('adamw_torch_fused', False),
                                                                ('adamw_torch', False), ('adamw_torch_fused', True),
                                                                ('adamw_torch_fused', False), ('adamw_torch_fused', False), ('adamw_torch_fused', True)]
    for v, x in runs.items():
        assert x['step_ms'] > 0 and x['optimizer_ms'] > 0 and x['forward_backward_ms'] > 0, (v, x)
        assert x['texts_per_s'] == pytest.approx(1000 * x['texts_per_step'] / x['step_ms'], rel=1e-3), (v, x)
    assert {v: x['batch_rows'] for v, x in runs.items() if 'packed' not in v} == dict.fromkeys(list(runs)[:5], 16)
    # packed rows: fewer rows a step, holding about the 16 texts of the others, read from the packed folder's record
    manifest = load_prepared(str(tmp/'out-step'/'packed-data')).manifest
    per_row = manifest['rows']['train'] / manifest['packing']['rows']['train']
    assert per_row > 1 and runs['project, packed']['batch_rows'] == round(16 / per_row)
    assert runs['project, packed']['texts_per_step'] == runs['project, packed, DDP']['texts_per_step'] == round(round(16 / per_row) * per_row, 3)
    assert res['step']['per_token_vs_trainer']['Trainer'] == 1.0 and len(res['step']['per_token_vs_trainer']) == 4
    for v, ops in res['step']['ops_ms'].items():   # the profiled steps' ops, in groups that add up to the whole
        assert list(ops) == ['matrix multiplies', 'dropout masks', 'AdamW kernel', 'zero fills', 'norms (clipping)', 'other', 'total'], v
        assert ops['matrix multiplies'] > 0 and (ops['AdamW kernel'] > 0) == (v != 'project, unfused AdamW'), (v, ops)
        assert abs(sum(ops.values()) - 2 * ops['total']) < 0.5, (v, ops)
    m = res['step']['median']
    assert res['step']['packed_vs_trainer_128'] == round(m['project, packed']['texts_per_s'] / m['Trainer, 128 tokens']['texts_per_s'], 3)
    assert digest(ROOT/'benchmarks'/'results.json') == before


def test_bench_buckets_trains_a_bf16_twin_with_the_same_seeds(tiny, monkeypatch):
    "bench_buckets --f1_bf16: the named 2-epoch setting again under bf16, on the same data and seeds, compared seed by seed."
    tmp, model = tiny
    before, results = digest(ROOT/'benchmarks'/'results.json'), tmp/'results-buckets.json'
    argv = ['--data', str(sample_data()), '--model', str(model), '--steps', '2', '--steps_512', '1', '--buckets', '2', '--seeds', '7',
            '--epochs', '1', '--f1_buckets', '2', '--matmul_size', '64', '--out', str(tmp/'out-buckets'), '--results', str(results)]
    # a setting that is not trained for 2 epochs: one line (the script's exit message) naming those that are, before anything is prepared
    with pytest.raises(SystemExit) as e: main_here(bench(monkeypatch, 'bench_buckets'), argv + ['--f1_bf16', 'packed'])
    assert one_line(e) == "--f1_bf16 'packed': not a 2-epoch setting of this invocation; choose among chosen, 2 buckets"
    assert not (tmp/'out-buckets').exists()
    cmd = [sys.executable, str(ROOT/'benchmarks'/'bench_buckets.py'), *argv, '--f1_bf16', '2 buckets']
    r = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(results.read_text())
    runs = res['two_epochs']
    assert list(runs) == ['chosen', '2 buckets', '2 buckets, bf16']
    assert [(rs[0]['seed'], rs[0]['bf16']) for rs in runs.values()] == [(7, False), (7, False), (7, True)]
    twin, bf = runs['2 buckets'][0], runs['2 buckets, bf16'][0]
    assert bf['input_shapes'] == twin['input_shapes'] and bf['steps'] == twin['steps']   # the same data, the same batches
    assert res['bf16_minus_fp32_per_seed'] == {'2 buckets, bf16': [bf['test_f1'] - twin['test_f1']]}
    assert res['bf16_minus_fp32']['2 buckets, bf16'] == pytest.approx(bf['test_f1'] - twin['test_f1'])
    assert res['model'] == Path(model).name and res['best_buckets'] == '2 buckets'
    assert list(res['settings']) == ['fixed 512', 'fixed 128', 'chosen', '2 buckets'] and res['matmul_peak_gflops'] > 0
    assert digest(ROOT/'benchmarks'/'results.json') == before


def test_bench_pack_order_trains_prepares_shuffled_rows(tiny, monkeypatch, capsys):
    """bench_pack_order: prepare --pack's rows (training filled in a shuffled order) trained per seed beside the chosen length;
    the script once in its own process (fp32), then `main` here: --bf16 (its run a torchrun as always), and two reruns that
    train nothing."""
    from trn_tutorials.data.sources import DataArguments
    from trn_tutorials.data.prepare import prepare
    from trn_tutorials.data.prepared import load_prepared
    tmp, model = tiny
    before, results, out = digest(ROOT/'benchmarks'/'results.json'), tmp/'results-order.json', tmp/'out-order'
    argv = ['--data', str(sample_data()), '--model', str(model), '--row_length', '64', '--max_texts', '8', '--seeds', '7',
            '--out', str(out), '--results', str(results)]
    r = subprocess.run([sys.executable, str(ROOT/'benchmarks'/'bench_pack_order.py'), *argv], capture_output=True, text=True, env=ENV, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(results.read_text())['pack_order']
    assert [x['seed'] for x in res['runs']] == [7] and res['runs'][0]['input_shapes'] == [[res['runs'][0]['batch_rows'], 64]]
    # no chosen-length runs in this results file: the script trained the baseline itself, on prepare's default layout
    (c,) = res['chosen_runs']
    assert c['seed'] == 7 and c['batch_rows'] == 32 and len(c['input_shapes'][0]) == 2 and c['input_shapes'][0][1] != 64
    assert res['f1_minus_chosen_per_seed'] == [res['runs'][0]['test_f1'] - c['test_f1']] == [res['f1_minus_chosen']]
    assert res['order'] == 'best fit over a shuffled order (seed 0)' and res['packing']['order_seed'] == 0
    # --bf16: the same rows under bf16 autocast, beside the fp32 twin above; the fp32 baseline is reused, not retrained
    order = bench(monkeypatch, 'bench_pack_order')
    main_here(order, argv + ['--bf16'])
    printed = capsys.readouterr()
    assert 'shuffled, bf16' in printed.out and 'chosen' not in printed.out, printed.err[-3000:]
    both = json.loads(results.read_text())
    (bf,), (fp,) = both['pack_order_bf16']['runs'], res['runs']
    assert both['pack_order'] == res and (bf['bf16'], fp['bf16']) == (True, False) and bf['input_shapes'] == fp['input_shapes']
    assert both['pack_order_bf16']['bf16_minus_fp32_per_seed'] == {'7': bf['test_f1'] - fp['test_f1']}
    assert both['pack_order_bf16']['f1_minus_chosen'] == bf['test_f1'] - c['test_f1']
    # the rows it trained are the tutorial's: prepare --pack in this process makes the same training rows
    prepare(DataArguments(data=str(sample_data()), model_id=model, dataset_path=str(tmp/'tutorial-packed'), pack=True, row_length=64, max_texts=8))
    ours, theirs = load_prepared(str(tmp/'tutorial-packed')).splits['train'], load_prepared(str(out/'data')).splits['train']
    assert ours['input_ids'] == theirs['input_ids'] and ours['labels'] == theirs['labels']
    # the reruns below train nothing: a run would fail the test
    monkeypatch.setattr(order, 'run', lambda args: pytest.fail(f'trained {args.output_dir}'))
    # a results file whose runs trained other rows refuses --reuse_runs in one line
    (old := json.loads(results.read_text()))['pack_order']['packing']['rows']['train'] += 1
    old['two_epochs'] = {'chosen': [c]}   # the chosen length's runs as bench_buckets.py writes them: the baseline of the rerun below
    results.write_text(json.dumps(old))
    with pytest.raises(SystemExit) as e: main_here(order, argv + ['--reuse_runs'])
    assert 'drop --reuse_runs' in one_line(e) and 'shuffled' not in capsys.readouterr().out
    # --bf16 with no fp32 twin of these rows: it says so in one line instead of writing a silent null
    # (and --reuse_runs trains nothing new: the bf16 runs above are kept)
    main_here(order, argv + ['--bf16', '--reuse_runs'])
    printed = capsys.readouterr()
    assert 'shuffled' not in printed.out, printed.err[-3000:]
    kept = json.loads(results.read_text())['pack_order_bf16']
    assert kept['runs'] == both['pack_order_bf16']['runs'] and kept['f1_minus_chosen'] == bf['test_f1'] - c['test_f1']
    note = [l for l in printed.err.splitlines() if l.startswith('note:')]
    assert len(note) == 1 and 'for seed(s) 7' in note[0] and '--seeds 7 without --bf16' in note[0], printed.err[-3000:]
    assert kept['bf16_minus_fp32'] is None
    assert digest(ROOT/'benchmarks'/'results.json') == before


def test_packed_runs_are_kept_only_for_the_rows_prepare_makes(monkeypatch):
    "bench_buckets --reuse_f1 and bench_pack_order --reuse_runs keep packed runs only of the same training rows."
    monkeypatch.syspath_prepend(str(ROOT/'benchmarks'))
    from bench_buckets import same_rows
    stored = json.loads((ROOT/'benchmarks'/'results.json').read_text())
    longest, shuffled = stored['packed_data'], stored['pack_order']['packing']   # the page's two packings of the same tweets
    assert (longest['order_seed'], shuffled['order_seed']) == (None, 0) and not same_rows(longest, shuffled)
    assert same_rows(shuffled, shuffled | {'rows': shuffled['rows'] | {'validation': 1}})   # validation and test rows train nothing
    assert not same_rows(None, shuffled) and not same_rows(shuffled, shuffled | {'max_texts': 6})


def test_bench_pairs_puts_the_run_glue_recipe_beside_both_encodings(tiny):
    tmp, model = tiny
    repo_results, before = ROOT/'benchmarks'/'results.json', digest(ROOT/'benchmarks'/'results.json')
    out, results = tmp/'out-pairs', tmp/'results-pairs.json'
    cmd = [sys.executable, str(ROOT/'benchmarks'/'bench_pairs.py'), '--task', 'emotion-pairs', '--data', str(sample_data()), '--pairs', '40',
           '--model', str(model), '--epochs', '1', '--seeds', '42', '--nproc_per_node', '1', '--out', str(out), '--results', str(results)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(results.read_text())
    assert list(res) == ['pairs']   # only its own key
    p = res['pairs']
    assert [(x['setting'], x['seed']) for x in p['runs']] == [('run_glue recipe', 42), ('project, pair', 42), ('project, joined', 42)]
    for x in p['runs']:
        assert set(x['scores']) == {'accuracy', 'f1'} and 0 <= x['scores']['accuracy'] <= 1 and x['samples_per_s'] > 0, x
    assert p['runs'][0]['padded_length'] == 128   # the recipe's
    assert p['runs'][1]['padded_length'] < 128   # the project's, chosen from the pair lengths
    assert [x['world_size'] for x in p['runs'][1:]] == [1, 1]   # --nproc_per_node 1: one torchrun worker each
    # the pair task: a tweet and 'i feel <emotion>', half of them its own emotion
    rows = (out/'emotion-pairs'/'train.csv').read_text().splitlines()
    assert rows[0] == 'sentence1,sentence2,label' and len(rows) == 41 and sum(l.endswith(',entailment') for l in rows) == 20
    # the project's pair data really are pairs: two segments
    prepared = load_prepared(str(out/'data-pair'))
    ds, m = prepared.splits, prepared.manifest
    assert m['text_pair'] is True and 1 in ds['train'][0]['token_type_ids']
    assert load_prepared(str(out/'data-joined')).manifest['text_pair'] is False
    assert digest(repo_results) == before
