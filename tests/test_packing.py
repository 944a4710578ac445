"""Packed rows (`trn_tutorials.packing`): the layout, the choices, the one-line errors, and the check that matters:
each text's logits, loss and gradients packed equal those of the text run alone. Runs on transformers 5 (.venv)
and 4.57 (the Trn1 stand-in lists this file), whose `BertModel` masks differ."""
import numpy as np, pytest, torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer, BertConfig, DistilBertConfig, ModernBertConfig

from trn_tutorials.core import UsageError
from trn_tutorials.data_files import EMOTION_LABELS, load_raw, sample_data
from trn_tutorials.models import tiny_bert
from trn_tutorials.packing import (ORDER_SEED, check_packable, choose_packing, pack_lengths, pack_model, pack_texts,
                                   packed_forward, packing_share, shuffled)


@pytest.fixture(scope='module')
def tiny(tmp_path_factory):
    words = sorted({w for s in load_raw(sample_data()).values() for t in s['text'] for w in t.split()})
    return tiny_bert(tmp_path_factory.mktemp('packing')/'tiny-bert', words, labels=EMOTION_LABELS, layers=2)


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
    check_packable(BertConfig()); check_packable(DistilBertConfig())   # DistilBERT packs too (tests/test_packing_families.py)


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
