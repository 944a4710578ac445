"""`prepare --pack` and a packed training run, end to end: the record, the refusals (before tokenizing, one line, a
fix that works), every text scored once, and the saved model a plain classifier that scores each text alone."""
import json

import numpy as np, pytest, torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from trn_tutorials.core import UsageError
from trn_tutorials.data_files import EMOTION_LABELS, load_raw, sample_data
from trn_tutorials.data import DataArguments, load_prepared, prepare
from trn_tutorials.data_checks import validate
from trn_tutorials.launch import launch
from trn_tutorials.models import tiny_bert
from trn_tutorials.packing import ORDER_SEED, pack_lengths, pack_splits, pack_texts, rows_for_texts, shuffled, texts_per_row
from trn_tutorials.arguments import TrainArguments


@pytest.fixture(scope='module')
def tiny(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('packed')
    words = sorted({w for s in load_raw(sample_data()).values() for t in s['text'] for w in t.split()})
    return tmp, tiny_bert(tmp/'tiny-bert', words, labels=EMOTION_LABELS)


def test_prepare_pack_keeps_every_text_once(tiny):
    tmp, model = tiny
    m = prepare(DataArguments(data=sample_data(), model_id=model, dataset_path=str(tmp/'data'), pack=True))
    ds, rec = load_prepared(str(tmp/'data'))
    pk = rec['packing']
    assert rec['bucket_lengths'] == [pk['row_length']] == [rec['max_length']] and pk['text_length'] <= pk['row_length']
    raw = load_raw(sample_data())
    for s, d in ds.items():
        labels = np.asarray(d['labels'])
        assert labels.shape == (pk['rows'][s], pk['max_texts'])
        assert (labels >= 0).sum() == rec['rows'][s] == len(raw[s])   # every text once
        seg = np.asarray(d['segment_ids'])
        assert all(len(set(r[r > 0])) == (l >= 0).sum() for r, l in zip(seg, labels))   # one segment per labelled slot
    assert m['packing'] == pk and rec['options']['pack'] is True and pk['order_seed'] == ORDER_SEED
    assert pk['texts_per_row'] == round(rec['rows']['train'] / pk['rows']['train'], 2)   # of the rows made, not of a plan
    # the batch that holds a padded batch's texts: rows a step times texts a row, as close to them as whole rows come
    per_row = texts_per_row(rec)
    assert per_row == rec['rows']['train'] / pk['rows']['train'] > 1 and texts_per_row({'rows': rec['rows']}) == 1
    for texts in (1, 16, 32, 100):
        n = rows_for_texts(texts, rec)
        assert abs(n * per_row - texts) <= min(abs(k * per_row - texts) for k in range(1, 200)) + 1e-9   # the nearest whole rows


@pytest.mark.parametrize('order_seed', [ORDER_SEED, None])
def test_training_rows_shuffled_validation_and_test_longest_first(tiny, order_seed):
    tmp, model = tiny
    tok, ds = AutoTokenizer.from_pretrained(model), validate(load_raw(sample_data()))
    packed, stats = pack_splits(ds, tok, 64, 64, 8, order_seed)
    for s, d in ds.items():
        ids = tok(list(d['text']), truncation=True, max_length=64)['input_ids']
        n = [len(i) for i in ids]
        rows = pack_lengths(n, 64, 8, order=shuffled(len(n), order_seed) if s == 'train' and order_seed is not None else None)
        want = pack_texts(ids, d['label'], rows, 64, 8, tok.pad_token_id)
        assert packed[s]['input_ids'] == want['input_ids'] and packed[s]['labels'] == want['labels'] and stats[s]['rows'] == len(rows)


@pytest.mark.parametrize('bad, says', [
    (dict(pack=True, buckets=2), '--pack makes one shape, --buckets 2 makes 2'),
    (dict(row_length=64), '--row_length sets packed rows: add --pack'),
    (dict(pack=True, max_texts=0), '--max_texts 0 is out of range'),
])
def test_bad_pack_options_one_line(tiny, bad, says):
    tmp, model = tiny
    with pytest.raises(UsageError) as e: prepare(DataArguments(data=sample_data(), model_id=model, dataset_path=str(tmp/'bad'), **bad))
    assert says in str(e.value) and '\n' not in str(e.value) and not (tmp/'bad').exists()


def test_short_row_refused_and_the_fix_works(tiny):
    tmp, model = tiny
    with pytest.raises(UsageError) as e:
        prepare(DataArguments(data=sample_data(), model_id=model, dataset_path=str(tmp/'short'), pack=True, row_length=16))
    fix = int(str(e.value).split('use --row_length ')[1].split()[0])
    assert not (tmp/'short').exists()
    m = prepare(DataArguments(data=sample_data(), model_id=model, dataset_path=str(tmp/'short'), pack=True, row_length=fix))
    assert m['packing']['row_length'] == fix


def test_a_family_packing_cannot_run_refused_before_tokenizing(tiny, tmp_path, modernbert_like):
    _, model = tiny
    d = modernbert_like(model)
    with pytest.raises(UsageError) as e: prepare(DataArguments(data=sample_data(), model_id=d, dataset_path=str(tmp_path/'data'), pack=True))
    assert 'not modernbert' in str(e.value) and '--buckets 2' in str(e.value) and not (tmp_path/'data').exists()


def test_packed_run_scores_each_text_once(tiny):
    tmp, _ = tiny
    if not (tmp/'data').exists(): test_prepare_pack_keeps_every_text_once(tiny)
    args = TrainArguments(dataset_path=str(tmp/'data'), output_dir=str(tmp/'model'), num_train_epochs=2, learning_rate=1e-3,
                          per_device_train_batch_size=8, per_device_eval_batch_size=8, logging_steps=5, backend='cpu')
    r = launch(args, 1, echo=False)
    m = r.metrics
    assert (m['validation']['rows'], m['test']['rows']) == (72, 72)   # texts, not rows
    assert m['train']['texts_per_row'] > 1 and len(m['train']['input_shapes']) <= 2
    model = AutoModelForSequenceClassification.from_pretrained(args.output_dir)   # a plain classifier again
    tok = AutoTokenizer.from_pretrained(args.output_dir)
    assert type(model).__name__ == 'BertForSequenceClassification'
    with torch.no_grad(): logits = model(**tok(['i feel happy', 'i am angry'], padding=True, return_tensors='pt')).logits
    assert logits.shape == (2, len(EMOTION_LABELS)) and torch.isfinite(logits).all()
