"""Packed rows (`trn_tutorials.data.packing`): the layout, the choices, the one-line errors, and the check that matters: each
text's logits, loss and gradients packed equal those of the text run alone, for every family in `PACKABLE` (tiny random
models built from configs), single texts and sentence pairs; then `prepare --pack` and a packed training run end to end
(the record, the refusals before tokenizing, every text scored once, the saved model a plain classifier). Runs on
transformers 5 (.venv) and 4.57 (the Trn1 stand-in lists this file), whose modules and `BertModel` masks differ."""
import inspect, json

import numpy as np, pytest, torch
from datasets import ClassLabel, Dataset, DatasetDict, Features, Sequence, Value
from transformers import (AutoModelForSequenceClassification, AutoTokenizer, BertConfig, DebertaV2Config, DistilBertConfig,
                          ElectraConfig, ModernBertConfig, RobertaConfig, RobertaTokenizerFast, XLMRobertaConfig)

from trn_tutorials.training.arguments import TrainArguments
from trn_tutorials.core.options import UsageError
from trn_tutorials.data.sources import DataArguments
from trn_tutorials.data.prepare import prepare
from trn_tutorials.data.prepared import load_prepared
from trn_tutorials.data.checks import validate
from trn_tutorials.data.files import EMOTION_LABELS
from trn_tutorials.data.sources import load_raw, sample_data
from trn_tutorials.training.launch import launch
from trn_tutorials.models import tiny_bert
from trn_tutorials.data.packing import (ORDER_SEED, PACKABLE, check_packable, choose_packing, pack_lengths, pack_model,
                                        pack_splits, pack_texts, packed_forward, packing_share, rows_for_texts, shuffled,
                                        texts_per_row)


@pytest.fixture(scope='module')
def tiny(prepared):
    "The shared tiny BERT (two layers: a mask that leaks between texts shows in the second layer's input too)."
    return str(prepared/'tiny-bert')


@pytest.fixture(scope='module')
def packed(prepared, tmp_path_factory):
    "The bundled sample packed (`prepare --pack`) for the shared tiny BERT: the folder and what `prepare` returned."
    data = tmp_path_factory.mktemp('packed')/'data'
    return data, prepare(DataArguments(data=sample_data(), model_id=str(prepared/'tiny-bert'), dataset_path=str(data), pack=True))


@pytest.mark.parametrize('seed', [0, 1, 2])
def test_every_text_once_within_the_row(seed):
    l = np.random.default_rng(seed).integers(2, 73, 2000)
    rows = pack_lengths(l, 72, 8)
    assert sorted(i for r in rows for i in r) == list(range(len(l)))
    assert all(l[r].sum() <= 72 and 1 <= len(r) <= 8 for r in rows)
    assert rows == pack_lengths(l, 72, 8)   # the same data packs the same way
    assert packing_share(l, rows, 72) == pytest.approx(1 - l.sum() / (72 * len(rows)))
    assert len(rows) >= np.ceil(l.sum() / 72)
    # in another order: the same guarantees, other rows (the longest text no longer opens the first row)
    order = np.random.default_rng(seed + 10).permutation(len(l))
    shuffled = pack_lengths(l, 72, 8, order=order)
    assert sorted(i for r in shuffled for i in r) == list(range(len(l)))
    assert all(l[r].sum() <= 72 and 1 <= len(r) <= 8 for r in shuffled)
    assert shuffled[0][0] == order[0] and rows[0][0] == int(np.argmax(l)) and shuffled != rows


def test_choices_report_what_they_give():
    l = np.random.default_rng(0).integers(4, 40, 3000)
    c = choose_packing(l, hidden_size=384)
    assert c['row_length'] >= 40 and c['row_length'] % 8 == 0 and 1 <= c['max_texts'] <= c['row_length']
    rows = pack_lengths(l, c['row_length'], c['max_texts'], order=shuffled(len(l)))   # as the training rows are filled
    assert c['order_seed'] == ORDER_SEED == 0 and c['rows'] == len(rows) and c['padding_share'] == round(packing_share(l, rows, c['row_length']), 4)
    assert c['padding_share'] < 0.02 and c['texts_per_row'] == round(len(l) / len(rows), 2)
    given = choose_packing(l, row_length=128, max_texts=4)
    assert (given['row_length'], given['max_texts']) == (128, 4)
    longest = choose_packing(l, hidden_size=384, order_seed=None)   # judged on rows filled longest first
    assert longest['order_seed'] is None and longest['rows'] == len(pack_lengths(l, longest['row_length'], longest['max_texts']))


def test_shuffled_order_is_a_seeded_permutation():
    o = shuffled(1000)
    assert sorted(o) == list(range(1000)) and list(o) != list(range(1000))
    assert list(o) == list(shuffled(1000, ORDER_SEED)) and list(o) != list(shuffled(1000, 1))   # the same rows on every machine


def test_bad_input_one_line_and_the_fix_works():
    l = [10, 66, 20]
    with pytest.raises(UsageError) as e: pack_lengths(l, 64, 8)
    msg = str(e.value)
    assert '\n' not in msg and 'longest text kept (66 tokens)' in msg and '--row_length 72' in msg
    assert len(pack_lengths(l, 72, 8)) == 2   # the fix, as printed
    for bad in (0, -1, 1.5):
        with pytest.raises(UsageError, match='max_texts'): pack_lengths(l, 72, bad)
    with pytest.raises(UsageError, match='no texts'): pack_lengths([], 72, 8)
    with pytest.raises(UsageError) as e: check_packable(ModernBertConfig())   # a family packing does not run
    assert '\n' not in str(e.value) and 'not modernbert' in str(e.value) and '--buckets' in str(e.value)
    check_packable(BertConfig()); check_packable(DistilBertConfig())   # DistilBERT packs too (each family: below)


def _batch(tok, texts, labels, L=48, S=6):
    enc = tok(texts)['input_ids']
    half = len(texts) // 2
    rows = [list(range(half)), list(range(half, len(texts)))]
    return enc, {k: torch.tensor(v) for k, v in pack_texts(enc, labels, rows, L, S, tok.pad_token_id).items()}, rows


TEXTS = ['i feel so happy today', 'i am angry', 'this makes me feel sad and lonely', 'ok', 'i am scared of the dark', 'wow what a surprise']


@pytest.mark.parametrize('attn', ['eager', 'sdpa'])
def test_packed_logits_loss_and_gradients_equal_each_text_alone(tiny, attn):
    tok = AutoTokenizer.from_pretrained(tiny)
    model = AutoModelForSequenceClassification.from_pretrained(tiny, attn_implementation=attn).eval()
    labels = [1, 3, 0, 2, 4, 5]
    enc, batch, rows = _batch(tok, TEXTS, labels)
    out = packed_forward(model, **batch)
    out.loss.backward()
    packed_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    alone = [model(input_ids=torch.tensor([e]), labels=torch.tensor([y])) for e, y in zip(enc, labels)]
    (sum(a.loss for a in alone) / len(alone)).backward()
    got = torch.cat([out.logits[r, :len(row)] for r, row in enumerate(rows)])
    torch.testing.assert_close(got, torch.cat([a.logits for a in alone]), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.loss, sum(a.loss for a in alone) / len(alone), atol=1e-6, rtol=1e-5)
    for n, p in model.named_parameters():
        if n in packed_grads: torch.testing.assert_close(packed_grads[n], p.grad, atol=1e-6, rtol=1e-4)
    assert out.logits.shape == (2, 6, len(EMOTION_LABELS))


def test_pack_model_keeps_the_model(tiny, tmp_path):
    tok = AutoTokenizer.from_pretrained(tiny)
    model = AutoModelForSequenceClassification.from_pretrained(tiny).eval()
    plain = tok(TEXTS[:2], padding=True, return_tensors='pt')
    before = model(**plain).logits
    cls = type(model)
    packed = pack_model(model)
    assert packed is model and type(model) is cls
    torch.testing.assert_close(model(**plain).logits, before)   # plain batches: the model's own forward
    _, batch, _ = _batch(tok, TEXTS, [0, 1, 2, 3, 4, 5])
    assert model(**batch).logits.shape == (2, 6, len(EMOTION_LABELS))
    model.save_pretrained(tmp_path/'saved')
    back = AutoModelForSequenceClassification.from_pretrained(tmp_path/'saved').eval()
    assert type(back) is cls and back.config.architectures == [cls.__name__]
    torch.testing.assert_close(back(**plain).logits, before)
    other = AutoModelForSequenceClassification.from_config(ModernBertConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                                                            num_attention_heads=2, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                                                            cls_token_id=1, sep_token_id=2))
    forward = other.forward
    with pytest.raises(UsageError, match='not modernbert'): pack_model(other)
    assert other.forward == forward   # refused before anything changes


def test_prepare_pack_keeps_every_text_once(packed):
    data, m = packed
    prepared = load_prepared(str(data))
    ds, rec = prepared.splits, prepared.manifest
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
def test_training_rows_shuffled_validation_and_test_longest_first(prepared, order_seed):
    model = str(prepared/'tiny-bert')
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
def test_bad_pack_options_one_line(prepared, tmp_path, bad, says):
    with pytest.raises(UsageError) as e:
        prepare(DataArguments(data=sample_data(), model_id=str(prepared/'tiny-bert'), dataset_path=str(tmp_path/'bad'), **bad))
    assert says in str(e.value) and '\n' not in str(e.value) and not (tmp_path/'bad').exists()


def test_short_row_refused_and_the_fix_works(prepared, tmp_path):
    tmp, model = tmp_path, str(prepared/'tiny-bert')
    with pytest.raises(UsageError) as e:
        prepare(DataArguments(data=sample_data(), model_id=model, dataset_path=str(tmp/'short'), pack=True, row_length=16))
    fix = int(str(e.value).split('use --row_length ')[1].split()[0])
    assert not (tmp/'short').exists()
    m = prepare(DataArguments(data=sample_data(), model_id=model, dataset_path=str(tmp/'short'), pack=True, row_length=fix))
    assert m['packing']['row_length'] == fix


def test_a_family_packing_cannot_run_refused_before_tokenizing(prepared, tmp_path, modernbert_like):
    d = modernbert_like(str(prepared/'tiny-bert'))
    with pytest.raises(UsageError) as e: prepare(DataArguments(data=sample_data(), model_id=d, dataset_path=str(tmp_path/'data'), pack=True))
    assert 'not modernbert' in str(e.value) and '--buckets 2' in str(e.value) and not (tmp_path/'data').exists()


def test_packed_run_scores_each_text_once(packed, tmp_path):
    args = TrainArguments(dataset_path=str(packed[0]), output_dir=str(tmp_path/'model'), num_train_epochs=1, learning_rate=1e-3,
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


# packing beyond BERT: tiny random models of each family in `PACKABLE`, built from configs
V, LABELS = 60, 3
SMALL = dict(vocab_size=V, num_labels=LABELS, attn_implementation='eager')


BERTISH = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, **SMALL)


CONFIGS = {   # family: (config, [CLS]/<s> id, [SEP]/</s> id, pad id, segment ids of a pair or None, separator between a pair's texts)
    'bert': (lambda: BertConfig(max_position_embeddings=64, **BERTISH), 2, 3, 0, True, 1),
    'roberta': (lambda: RobertaConfig(max_position_embeddings=66, pad_token_id=1, bos_token_id=0, eos_token_id=2, type_vocab_size=1, **BERTISH), 0, 2, 1, False, 2),
    'xlm-roberta': (lambda: XLMRobertaConfig(max_position_embeddings=66, pad_token_id=1, bos_token_id=0, eos_token_id=2, type_vocab_size=1, **BERTISH), 0, 2, 1, False, 2),
    'electra': (lambda: ElectraConfig(embedding_size=16, max_position_embeddings=64, **BERTISH), 2, 3, 0, True, 1),   # embeddings narrower than the layers
    'distilbert': (lambda: DistilBertConfig(dim=32, n_layers=2, n_heads=2, hidden_dim=64, max_position_embeddings=64, **SMALL), 2, 3, 0, False, 1),
    'deberta-v2': (lambda: DebertaV2Config(max_position_embeddings=64, relative_attention=True, position_biased_input=False, pos_att_type=['p2c', 'c2p'],
                                           max_relative_positions=-1, position_buckets=16, type_vocab_size=2, norm_rel_ebd='layer_norm', **BERTISH), 1, 2, 0, True, 1),
    'deberta-v2 absolute': (lambda: DebertaV2Config(max_position_embeddings=64, relative_attention=True, position_biased_input=True, pos_att_type=['c2p'],
                                                    type_vocab_size=0, **BERTISH), 1, 2, 0, False, 1),   # DeBERTa v2's position embeddings too, no segment ids
}


def _model(family, seed=0):
    torch.manual_seed(seed)
    cfg = CONFIGS[family][0]()
    return AutoModelForSequenceClassification.from_config(cfg, attn_implementation='eager').eval()


def _texts(family, pairs, n=7, seed=0):
    "Token ids (and segment ids where the family has them) of `n` random texts or pairs, as the family's tokenizer lays them out."
    _, cls, sep, _, typed, seps = CONFIGS[family]
    rng = np.random.default_rng(seed)
    word = lambda: [int(i) for i in rng.integers(5, V, rng.integers(1, 9))]
    ids, types = [], []
    for _ in range(n):
        a = [cls] + word() + [sep]
        b = (word() + [sep]) if pairs else []
        ids.append(a + [sep] * (seps - 1) * bool(pairs) + b)
        types.append([0] * (len(ids[-1]) - len(b)) + [1] * len(b))
    return ids, (types if typed else None)


FAMILIES = list(CONFIGS)


@pytest.mark.parametrize('pairs', [False, True], ids=['single', 'pairs'])
@pytest.mark.parametrize('family', FAMILIES)
def test_each_packed_text_scores_as_it_does_alone(family, pairs):
    model = _model(family)
    assert model.config.model_type in PACKABLE
    ids, types = _texts(family, pairs)
    labels = [i % LABELS for i in range(len(ids))]
    rows = pack_lengths([len(i) for i in ids], 48, 4)
    assert len(rows) >= 2 and max(len(r) for r in rows) >= 2   # texts share rows
    batch = {k: torch.tensor(v) for k, v in pack_texts(ids, labels, rows, 48, 4, CONFIGS[family][3], types).items()}
    assert ('token_type_ids' in batch) == (types is not None)
    if types is not None and pairs: assert batch['token_type_ids'].sum() > 0   # the second texts' segment ids are in the rows
    out = packed_forward(model, **batch)
    out.loss.backward()
    packed_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    alone = [model(input_ids=torch.tensor([ids[i]]), labels=torch.tensor([labels[i]]),
                   **({'token_type_ids': torch.tensor([types[i]])} if types is not None else {})) for r in rows for i in r]
    (sum(a.loss for a in alone) / len(alone)).backward()
    got = torch.cat([out.logits[k, :len(r)] for k, r in enumerate(rows)])
    want = torch.cat([a.logits for a in alone])
    diff = (got - want).abs().max().item()
    print(f'{family} {"pairs" if pairs else "single"}: max |packed - alone| = {diff:.2e}')
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.loss, sum(a.loss for a in alone) / len(alone), atol=1e-6, rtol=1e-5)
    assert packed_grads and all(torch.allclose(packed_grads[n], p.grad, atol=1e-6, rtol=1e-4) for n, p in model.named_parameters() if n in packed_grads)


@pytest.mark.parametrize('family', FAMILIES)
def test_pack_model_routes_packed_and_plain_batches(family):
    model = _model(family)
    ids, types = _texts(family, True, n=4)
    plain = {'input_ids': torch.tensor([ids[0]]), 'attention_mask': torch.ones(1, len(ids[0]), dtype=torch.long)}
    if types is not None: plain['token_type_ids'] = torch.tensor([types[0]])
    before = model(**plain).logits
    pack_model(model)
    torch.testing.assert_close(model(**plain).logits, before)   # plain batches: the model's own forward
    batch = {k: torch.tensor(v) for k, v in pack_texts(ids, [0, 1, 2, 0], [[0, 1], [2, 3]], 40, 3, CONFIGS[family][3], types).items()}
    out = model(**batch)
    assert out.logits.shape == (2, 3, LABELS) and torch.isfinite(out.loss)
    torch.testing.assert_close(out.logits[0, 0], before[0], atol=1e-5, rtol=1e-5)


def test_other_families_refused_in_one_line():
    m = ModernBertConfig()
    with pytest.raises(UsageError) as e: check_packable(m)
    msg = str(e.value)
    assert '\n' not in msg and 'not modernbert' in msg and '--buckets 2' in msg and all(f in msg for f in ('bert', 'roberta', 'distilbert'))
    with pytest.raises(UsageError) as e: check_packable(DebertaV2Config(conv_kernel_size=3))   # deberta-v2-xlarge: a convolution across the row
    assert '\n' not in str(e.value) and 'conv_kernel_size 3' in str(e.value) and '--buckets 2' in str(e.value)
    for f in FAMILIES: check_packable(CONFIGS[f][0]())


def _split(texts, pairs, labels, names):
    cols = {'text': texts, **({'text_pair': pairs} if pairs else {}), 'label': labels}
    feats = Features({'text': Value('string'), **({'text_pair': Value('string')} if pairs else {}), 'label': ClassLabel(names=names)})
    return Dataset.from_dict(cols, features=feats)


A = ['the cat sat on the mat', 'a dog ran', 'it rained all day long and then it rained again', 'ok', 'the sun is out', 'birds sing']


B = ['a cat was on a mat', 'the dog sat', 'no rain today', 'fine then ok', 'it is night and dark outside', 'no birds']


@pytest.fixture(scope='module')
def bert_dir(tmp_path_factory):
    words = sorted({w for t in A + B for w in t.split()})
    return tiny_bert(tmp_path_factory.mktemp('pairs')/'tiny-bert', words, labels=['no', 'yes'])


@pytest.fixture(scope='module')
def roberta_dir(tmp_path_factory):
    "A tiny RoBERTa with a byte-level BPE tokenizer of single bytes (no merges), written here: no Hub."
    path = tmp_path_factory.mktemp('pairs')/'tiny-roberta'; path.mkdir()
    seen = list(range(ord('!'), ord('~') + 1)) + list(range(ord('¡'), ord('¬') + 1)) + list(range(ord('®'), ord('ÿ') + 1))
    chars = [chr(b) for b in seen] + [chr(256 + k) for k in range(256 - len(seen))]   # GPT-2's byte-to-character table: 256 characters
    vocab = {t: i for i, t in enumerate(['<s>', '<pad>', '</s>', '<unk>', '<mask>'] + chars)}
    (path/'vocab.json').write_text(json.dumps(vocab)); (path/'merges.txt').write_text('#version: 0.2\n')
    given = ({'vocab': vocab, 'merges': []} if 'vocab' in inspect.signature(RobertaTokenizerFast.__init__).parameters   # transformers 5
             else {'vocab_file': str(path/'vocab.json'), 'merges_file': str(path/'merges.txt')})
    tok = RobertaTokenizerFast(**given)
    assert len(tok.tokenize('it rained')) == 9
    tok.save_pretrained(path)
    torch.manual_seed(0)
    cfg = RobertaConfig(vocab_size=len(vocab), max_position_embeddings=130, pad_token_id=1, bos_token_id=0, eos_token_id=2, type_vocab_size=1,
                        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, num_labels=2)
    AutoModelForSequenceClassification.from_config(cfg).save_pretrained(path)
    return str(path)


@pytest.mark.parametrize('which', ['bert', 'roberta'])
def test_pack_splits_keeps_each_pair_whole(which, bert_dir, roberta_dir):
    path = {'bert': bert_dir, 'roberta': roberta_dir}[which]
    tok = AutoTokenizer.from_pretrained(path)
    ds = DatasetDict({'train': _split(A, B, [0, 1, 0, 1, 1, 0], ['no', 'yes']), 'validation': _split(A[:3], B[:3], [1, 0, 1], ['no', 'yes'])})
    L = 14 if which == 'bert' else 40   # the RoBERTa tokenizer here: a token a byte; both cut the longest pair, longest first
    packed, stats = pack_splits(ds, tok, L, 96, 4)
    typed = 'token_type_ids' in tok.model_input_names
    assert ('token_type_ids' in packed['train'].column_names) == typed == (which == 'bert')
    model = AutoModelForSequenceClassification.from_pretrained(path, attn_implementation='eager').eval()
    for s, d in ds.items():
        enc = tok(list(d['text']), list(d['text_pair']), truncation='longest_first', max_length=L)
        assert any(len(e) == L for e in enc['input_ids'])   # some pairs were cut, to L together
        p = packed[s]
        assert (np.asarray(p['labels']) >= 0).sum() == stats[s]['texts'] == len(d)
        seen = []
        for r in range(len(p)):
            ids, seg, cls, lab = (np.asarray(p[r][k]) for k in ('input_ids', 'segment_ids', 'cls_index', 'labels'))
            for slot in np.flatnonzero(lab >= 0):
                at = np.flatnonzero(seg == seg[cls[slot]])
                assert at[0] == cls[slot] and ids[cls[slot]] == tok.cls_token_id   # each pair its own [CLS], first
                i = next(i for i, e in enumerate(enc['input_ids']) if e == ids[at].tolist() and i not in seen)
                seen.append(i)
                assert lab[slot] == d['label'][i]
                if typed: assert np.asarray(p[r]['token_type_ids'])[at].tolist() == enc['token_type_ids'][i]   # 0, then 1 for the second text
        assert sorted(seen) == list(range(len(d)))   # every pair once
        batch = {k: torch.tensor(p[k]) for k in p.column_names}
        with torch.no_grad():
            out = packed_forward(model, **batch).logits
            alone = [model(**tok(d['text'][i], d['text_pair'][i], truncation='longest_first', max_length=L, return_tensors='pt')).logits[0] for i in range(len(d))]
        for r in range(len(p)):
            for slot in np.flatnonzero(np.asarray(p[r]['labels']) >= 0):
                ids = np.asarray(p[r]['input_ids']); seg = np.asarray(p[r]['segment_ids'])
                at = np.flatnonzero(seg == seg[p[r]['cls_index'][slot]])
                i = next(i for i, e in enumerate(enc['input_ids']) if e == ids[at].tolist())
                torch.testing.assert_close(out[r, slot], alone[i], atol=1e-5, rtol=1e-5)


def test_pack_splits_single_texts_have_no_segment_column(bert_dir):
    tok = AutoTokenizer.from_pretrained(bert_dir)
    packed, _ = pack_splits(DatasetDict({'train': _split(A, None, [0, 1, 0, 1, 1, 0], ['no', 'yes'])}), tok, 24, 48, 4)
    assert packed['train'].column_names == ['input_ids', 'position_ids', 'segment_ids', 'cls_index', 'labels']   # as before pairs


@pytest.mark.parametrize('feature, says', [(Value('float32'), 'numbers (regression)'), (Sequence(ClassLabel(names=['a', 'b'])), 'multi-label')])
def test_pack_splits_refuses_other_problem_types(bert_dir, feature, says):
    tok = AutoTokenizer.from_pretrained(bert_dir)
    labels = [0.5, 1.0] if isinstance(feature, Value) else [[0], [0, 1]]
    d = Dataset.from_dict({'text': A[:2], 'label': labels}, features=Features({'text': Value('string'), 'label': feature}))
    with pytest.raises(UsageError) as e: pack_splits(DatasetDict({'train': d}), tok, 24, 48, 4)
    assert says in str(e.value) and '\n' not in str(e.value) and 'without --pack' in str(e.value)


@pytest.mark.parametrize('family', ['bert', 'roberta', 'xlm-roberta', 'distilbert'])   # those with PyTorch's attention in transformers 4.57 and 5
def test_sdpa_attention_packs_the_same(family):
    "The Trainer loads models with transformers' default attention (`sdpa`) off XLA: the block mask holds there too."
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_config(CONFIGS[family][0](), attn_implementation='sdpa').eval()
    ids, types = _texts(family, True, n=6, seed=1)
    rows = pack_lengths([len(i) for i in ids], 48, 4)
    batch = {k: torch.tensor(v) for k, v in pack_texts(ids, [0] * len(ids), rows, 48, 4, CONFIGS[family][3], types).items()}
    with torch.no_grad():
        got = torch.cat([packed_forward(model, **batch).logits[k, :len(r)] for k, r in enumerate(rows)])
        want = torch.cat([model(input_ids=torch.tensor([ids[i]]), **({'token_type_ids': torch.tensor([types[i]])} if types else {})).logits
                          for r in rows for i in r])
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_prepare_pack_pairs_and_train(tmp_path):
    "`prep --text_column s1 s2 --pack`, then a packed run: the pairs' segment ids in the rows and handed to the model, every pair scored once."
    from conftest import FIRST, SECOND, pairs_csv
    from trn_tutorials.data.sources import DataArguments
    from trn_tutorials.data.prepare import prepare
    from trn_tutorials.data.prepared import load_prepared
    from trn_tutorials.training.launch import launch
    from trn_tutorials.training.arguments import TrainArguments
    words = sorted({w.lower() for t in FIRST + SECOND for w in t.split()} | {str(i) for i in range(48)})
    model = tiny_bert(tmp_path/'tiny', words, labels=['no', 'yes'])
    prepare(DataArguments(data=pairs_csv(tmp_path/'p.csv', n=48), model_id=model, dataset_path=str(tmp_path/'data'), text_column=['s1', 's2'],
                          pack=True, eval_fraction=0.25))
    prepared = load_prepared(str(tmp_path/'data'))
    ds, rec = prepared.splits, prepared.manifest
    assert rec['text_pair'] is True and ds['train'].column_names == ['input_ids', 'position_ids', 'segment_ids', 'token_type_ids', 'cls_index', 'labels']
    tt, seg = np.asarray(ds['train']['token_type_ids']), np.asarray(ds['train']['segment_ids'])
    assert (tt == 1).any() and not (tt[seg == 0]).any()   # second texts marked, padding 0
    assert 'token_type_ids' in inspect.signature(pack_model(AutoModelForSequenceClassification.from_pretrained(model)).forward).parameters   # the Trainer keeps the column
    r = launch(TrainArguments(dataset_path=str(tmp_path/'data'), output_dir=str(tmp_path/'model'), num_train_epochs=1, learning_rate=1e-3,
                              per_device_train_batch_size=4, per_device_eval_batch_size=4, logging_steps=5, backend='cpu'), 1, echo=False)
    assert r.metrics['validation']['rows'] == 12 and sum(map(sum, r.metrics['validation']['confusion'])) == 12   # texts, each once
