"""Issue 43, serving: sentence pairs, regression and multi-label through the handler (input_fn -> predict_fn -> output_fn), the
TorchScript trace, transformers' pipeline (what the Hugging Face inference image runs), `predict` and `sm-predict`.

The models are tiny BERTs made here with `config.problem_type` set and saved with their tokenizer, as `train` saves them."""
import json, re, shutil
from pathlib import Path

import pytest
import torch

from trn_tutorials.core import UsageError
from trn_tutorials.models import tiny_bert
from trn_tutorials.inference import JSON, TORCHSCRIPT, TRACE_INFO, RequestError, input_fn, model_fn, output_fn, predict_fn, texts_of

WORDS = 'i feel so happy and proud today am scared of what might happen was furious at him the cat sat on mat a dog'.split()
LABELS = ['anger', 'joy', 'love', 'sadness']
SINGLE = ['i feel so happy today', 'i was furious at him']
PAIRS = [{'text': 'the cat sat on the mat', 'text_pair': 'a cat sat on a mat'},
         {'text': 'i am scared', 'text_pair': 'what might happen to him today and the dog and the cat'}]


def kind_model(path:Path, problem_type:str, labels:list[str], threshold=None, lengths=None) -> str:
    "A tiny random BERT with `problem_type` and `labels` (id2label), saved with its tokenizer; `threshold` in config.json, `lengths` in metrics.json."
    from transformers import AutoConfig, BertForSequenceClassification
    tiny_bert(path, WORDS, labels=['a', 'b'])   # the tokenizer and a config to start from
    cfg = AutoConfig.from_pretrained(path)
    cfg.num_labels, cfg.problem_type = len(labels), problem_type
    cfg.id2label, cfg.label2id = dict(enumerate(labels)), {n: i for i, n in enumerate(labels)}
    if threshold is not None: cfg.multi_label_threshold = threshold
    torch.manual_seed(1)
    model = BertForSequenceClassification(cfg)
    with torch.no_grad():   # token type embeddings that matter: a pair scored without its segment ids would differ
        model.bert.embeddings.token_type_embeddings.weight.normal_(0, 1)
        model.classifier.weight.mul_(20)   # logits spread out, so sigmoids land on both sides of a threshold
        if problem_type == 'regression': model.classifier.bias.fill_(3.0)   # a value a sigmoid could not give
    model.save_pretrained(path)
    if lengths: (path/'metrics.json').write_text(json.dumps({'bucket_lengths': lengths}))
    return str(path)


def eager_logits(model_dir, items) -> torch.Tensor:
    "The model's logits for each text or pair on its own, tokenized by the tokenizer (`tokenizer(text, text_pair)`), unpadded."
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    tok, model = AutoTokenizer.from_pretrained(model_dir), AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    rows = []
    with torch.no_grad():
        for it in items:
            enc = tok(it['text'], it['text_pair'], return_tensors='pt') if isinstance(it, dict) else tok(it, return_tensors='pt')
            rows.append(model(**enc).logits[0])
    return torch.stack(rows)


def handled(model_dir, body) -> list:
    "The answer of the four functions for one request, as the serving container calls them."
    out, ctype = output_fn(predict_fn(input_fn(json.dumps(body), JSON), model_fn(str(model_dir))), JSON)
    assert ctype == JSON
    return json.loads(out)


@pytest.fixture(scope='module')
def models(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('kinds')
    return {'single': kind_model(tmp/'single', 'single_label_classification', LABELS, lengths=[8, 16, 32]),
            'regression': kind_model(tmp/'regression', 'regression', ['score'], lengths=[8, 16, 32]),
            'multi': kind_model(tmp/'multi', 'multi_label_classification', LABELS, threshold=0.4, lengths=[8, 16, 32]),
            'multi-default': kind_model(tmp/'multi-default', 'multi_label_classification', LABELS)}


# ---------------------------------------------------------------------------------------------------------------
# requests
# ---------------------------------------------------------------------------------------------------------------
def test_pair_requests_are_read():
    one = {'text': 'a', 'text_pair': 'b'}
    assert texts_of({'inputs': one}) == [one]
    assert texts_of({'inputs': [one, one]}) == [one, one]
    assert texts_of({'inputs': ['x', one]}) == ['x', one]   # a mix of single texts and pairs is one request
    assert input_fn(json.dumps({'inputs': one}), JSON) == [one]


BAD_PAIRS = [  # inputs, what the one line must say
    ({'text': 'ok'}, "inputs is an object with key(s) 'text', not a sentence pair {\"text\": \"a text\", \"text_pair\": \"another\"}"),
    ({'sentence1': 'a', 'sentence2': 'b'}, "inputs is an object with key(s) 'sentence1', 'sentence2', not a sentence pair"),
    ({'text': 'a', 'text_pair': 'b', 'label': 1}, "key(s) 'text', 'text_pair', 'label', not a sentence pair"),
    ({}, 'inputs is an object with no keys, not a sentence pair'),
    (['fine', {'text_pair': 'b'}], "item 1 of inputs is an object with key(s) 'text_pair', not a sentence pair"),
    ([{'text': 'a', 'text_pair': 3}], 'text_pair of item 0 of inputs is a number, not a text'),
    ([{'text': ' ', 'text_pair': 'b'}], 'text of item 0 of inputs is empty'),
    (['a', ['b', 'c']], 'item 1 of inputs is a list, not a text or a sentence pair'),
]


@pytest.mark.parametrize('inputs,says', BAD_PAIRS, ids=[str(i) for i in range(len(BAD_PAIRS))])
def test_bad_pair_objects_get_one_line_400(inputs, says):
    with pytest.raises(RequestError) as e: input_fn(json.dumps({'inputs': inputs}), JSON)
    assert e.value.status_code == 400 and says in str(e.value) and '\n' not in str(e.value), str(e.value)


# ---------------------------------------------------------------------------------------------------------------
# the answers of each kind, end to end
# ---------------------------------------------------------------------------------------------------------------
def test_single_label_pairs_score_as_the_tokenizers_pair(models):
    items = SINGLE + PAIRS
    got = handled(models['single'], {'inputs': items})
    want = torch.softmax(eager_logits(models['single'], items), -1)
    assert [g['label'] for g in got] == [LABELS[i] for i in want.argmax(-1).tolist()]
    assert max(abs(g['score'] - w) for g, w in zip(got, want.max(-1).values.tolist())) <= 1.0001e-4
    # the segment ids matter for this model: the pair scored as one text (all segment ids 0) is another answer
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    tok, m = AutoTokenizer.from_pretrained(models['single']), AutoModelForSequenceClassification.from_pretrained(models['single']).eval()
    enc = tok(PAIRS[0]['text'], PAIRS[0]['text_pair'], return_tensors='pt')
    assert enc['token_type_ids'].sum() > 0
    with torch.no_grad(): flat = torch.softmax(m(input_ids=enc['input_ids'], attention_mask=enc['attention_mask']).logits[0], -1)
    assert abs(flat.max().item() - got[2]['score']) > 1e-3 or LABELS[flat.argmax().item()] != got[2]['label']


def test_regression_answers_the_raw_value(models):
    items = SINGLE + PAIRS
    got = handled(models['regression'], {'inputs': items})
    want = eager_logits(models['regression'], items)[:, 0].tolist()
    assert [set(g) for g in got] == [{'label', 'score'}] * len(items) and {g['label'] for g in got} == {'score'}
    assert max(abs(g['score'] - w) for g, w in zip(got, want)) <= 1e-5
    assert any(not 0 <= g['score'] <= 1 for g in got), got   # not squashed: this model's outputs leave [0, 1]
    assert handled(models['regression'], {'inputs': PAIRS[1]})[0]['score'] == pytest.approx(want[3], abs=1e-5)   # one pair alone


def test_multi_label_sigmoid_and_threshold(models):
    items = SINGLE + PAIRS
    for name, threshold in (('multi', 0.4), ('multi-default', 0.5)):
        clf = model_fn(models[name])
        assert (clf.problem_type, clf.threshold) == ('multi_label_classification', threshold)
        assert f'multi-label, threshold {threshold}' in repr(clf)
        got = handled(models[name], {'inputs': items})
        probs = torch.sigmoid(eager_logits(models[name], items)).tolist()
        for g, p in zip(got, probs):
            assert set(g) == {'labels', 'scores'} and list(g['scores']) == LABELS
            assert max(abs(g['scores'][n] - q) for n, q in zip(LABELS, p)) <= 1.0001e-4
            assert g['labels'] == [n for n, q in zip(LABELS, p) if q >= threshold]
        assert {len(g['labels']) for g in got} != {0}, got   # some labels given, so the threshold was applied to real scores


def test_pairs_padded_to_the_trained_lengths(models):
    clf = model_fn(models['regression'])
    seen = []
    clf.model.register_forward_pre_hook(lambda m, a, kw: seen.append((tuple(kw['input_ids'].shape), kw['token_type_ids'].clone())), with_kwargs=True)
    long = {'text': ' '.join(['cat'] * 40), 'text_pair': ' '.join(['dog'] * 40)}
    predict_fn(PAIRS + [long], clf)
    assert {n for (_, n), _ in seen} <= {8, 16, 32}
    types = seen[-1][1][-1].tolist()   # the long pair (the longest, last): cut to 32 tokens, longest text first, both texts kept
    assert types == clf.tokenizer(long['text'], long['text_pair'], truncation='longest_first', max_length=32)['token_type_ids']
    assert len(types) == 32 and 15 <= types.count(1) <= 16, types


def test_model_folder_kinds_refused_in_one_line(models, tmp_path):
    from transformers import AutoConfig
    from trn_tutorials.inference import ModelFolderError
    for change, says in (({'problem_type': 'ranking'}, "problem_type 'ranking': set one of single_label_classification, regression"),
                         ({'multi_label_threshold': 1.5}, 'multi_label_threshold 1.5: set a number between 0 and 1')):
        d = tmp_path/next(iter(change))
        shutil.copytree(models['multi'], d)
        cfg = json.loads((d/'config.json').read_text()); cfg.update(change); (d/'config.json').write_text(json.dumps(cfg))
        with pytest.raises(ModelFolderError) as e: model_fn(str(d))
        assert says in str(e.value) and '\n' not in str(e.value), str(e.value)
    d = tmp_path/'no-problem-type'   # one output and no problem_type: a regression, as transformers' loss reads it
    shutil.copytree(models['regression'], d)
    cfg = json.loads((d/'config.json').read_text()); cfg.pop('problem_type'); (d/'config.json').write_text(json.dumps(cfg))
    assert AutoConfig.from_pretrained(d).problem_type is None and model_fn(str(d)).problem_type == 'regression'


# ---------------------------------------------------------------------------------------------------------------
# TorchScript: the trace takes (input_ids, attention_mask) and derives the segment ids of a pair
# ---------------------------------------------------------------------------------------------------------------
def test_traced_pairs_agree_with_eager(models, tmp_path):
    from trn_tutorials.torchscript import trace
    for name in ('regression', 'multi'):
        d = tmp_path/name
        shutil.copytree(models[name], d)
        items = SINGLE + PAIRS
        eager = predict_fn(items, model_fn(str(d)))
        info = trace(str(d))
        assert info['pairs'] is True and info['segment_ids'].startswith('1 after the first separator') and info['max_abs_diff'] <= 1e-4
        clf = model_fn(str(d))
        assert clf.traced and clf.pairs and not clf.segment_ids
        got = predict_fn(items, clf)
        if name == 'regression': assert max(abs(g['score'] - e['score']) for g, e in zip(got, eager)) <= 1e-4
        else:
            assert [g['labels'] for g in got] == [e['labels'] for e in eager]
            assert max(abs(g['scores'][n] - e['scores'][n]) for g, e in zip(got, eager) for n in LABELS) <= 2e-4
    # a trace made before traces took pairs (no 'pairs' in its record): single texts served, a pair refused in one line
    rec = json.loads((d/TRACE_INFO).read_text()); rec.pop('pairs'); (d/TRACE_INFO).write_text(json.dumps(rec))
    old = model_fn(str(d))
    assert not old.pairs and len(predict_fn(SINGLE, old)) == 2
    with pytest.raises(RequestError) as e: predict_fn(PAIRS, old)
    assert e.value.status_code == 400 and 'traced without segment ids' in str(e.value) and 'trace(model_dir)' in str(e.value)


def test_segments_follow_the_tokenizers_pair_rule(models):
    from transformers import AutoTokenizer
    from trn_tutorials.torchscript import segments
    tok = AutoTokenizer.from_pretrained(models['single'])
    pairs = tok([p['text'] for p in PAIRS], [p['text_pair'] for p in PAIRS], padding=True, return_tensors='pt')
    singles = tok(SINGLE, padding=True, return_tensors='pt')
    for enc in (pairs, singles):
        assert torch.equal(segments(enc['input_ids'], enc['attention_mask'], tok.sep_token_id), enc['token_type_ids'])


def test_distilbert_with_a_bert_tokenizer_serves_pairs(models, distilbert_like):
    "A model without segment ids is given none, even when its tokenizer makes them."
    d = distilbert_like(models['single'])
    cfg = json.loads((Path(d)/'config.json').read_text())
    cfg.update(id2label={'0': 'no', '1': 'yes'}, label2id={'no': 0, 'yes': 1}); (Path(d)/'config.json').write_text(json.dumps(cfg))
    clf = model_fn(d)
    assert not clf.segment_ids and clf.pairs
    assert [set(a) for a in predict_fn(PAIRS, clf)] == [{'label', 'score'}] * 2


# ---------------------------------------------------------------------------------------------------------------
# the Hugging Face inference image: transformers' pipeline, as its toolkit calls it (pipeline(inputs, **parameters))
# ---------------------------------------------------------------------------------------------------------------
def test_what_the_hf_pipeline_answers_for_each_kind(models):
    from transformers import pipeline
    ours = {k: handled(models[k], {'inputs': SINGLE + PAIRS}) for k in ('single', 'regression', 'multi')}
    pipe = {k: pipeline('text-classification', model=models[k], device=-1) for k in ours}
    # single-label and regression: the same answers (the pipeline's scores unrounded); pairs as {"text", "text_pair"} objects
    for k in ('single', 'regression'):
        theirs = pipe[k](SINGLE + PAIRS)
        assert [t['label'] for t in theirs] == [o['label'] for o in ours[k]]
        assert max(abs(t['score'] - o['score']) for t, o in zip(theirs, ours[k])) <= 1.0001e-4
    assert isinstance(pipe['single'](PAIRS[0]), dict)   # one pair alone: one object, not a list (our handler: a list of one)
    # multi-label: by default only the top label and its sigmoid, no threshold; top_k=None gives every label's sigmoid
    top = pipe['multi'](SINGLE + PAIRS)
    for t, o in zip(top, ours['multi']):
        best = max(o['scores'], key=o['scores'].get)
        assert t['label'] == best and abs(t['score'] - o['scores'][best]) <= 1.0001e-4
    every = pipe['multi'](SINGLE + PAIRS, top_k=None)
    for t, o in zip(every, ours['multi']):
        assert {d['label']: round(d['score'], 4) for d in t} == pytest.approx(o['scores'], abs=1.0001e-4)


# ---------------------------------------------------------------------------------------------------------------
# predict and sm-predict: the pair form goes out; each kind is printed
# ---------------------------------------------------------------------------------------------------------------
def sent_bodies():
    "Capture the bodies `predict` sends (boto3's default session, as the CLI uses)."
    import boto3
    bodies = []
    boto3.setup_default_session()
    boto3.DEFAULT_SESSION.events.register('provide-client-params.sagemaker-runtime.InvokeEndpoint',
                                          lambda params, **kw: bodies.append(json.loads(params['Body'])))
    return bodies


def queue(moto, answer):
    import urllib.request
    data = json.dumps({'region': 'us-east-1', 'results': [{'Body': json.dumps(answer), 'ContentType': JSON}]}).encode()
    urllib.request.urlopen(urllib.request.Request(moto.url + '/moto-api/static/sagemaker/endpoint-results', data=data, method='POST'), timeout=10).read()


def test_predict_sends_pairs(moto_server):
    import boto3
    from trn_tutorials.endpoint import predict
    with pytest.raises(UsageError, match=re.escape("item 0 of inputs is an object with key(s) 'text', 'second', not a sentence pair")):
        predict('any', [{'text': 'a', 'second': 'b'}])
    bodies = sent_bodies()
    try:
        queue(moto_server, [{'label': 'score', 'score': 4.2}])
        assert predict('any', [PAIRS[0]]) == [{'label': 'score', 'score': 4.2}]
        queue(moto_server, [{'label': 'score', 'score': 4.2}])
        assert predict('any', {'inputs': PAIRS[0]}) == [{'label': 'score', 'score': 4.2}]   # a whole request
        assert bodies == [{'inputs': [PAIRS[0]]}] * 2   # always a list: the Hugging Face image answers a list then too
    finally: boto3.DEFAULT_SESSION = None


def test_sm_predict_text_pair(moto_server, capsys):
    import boto3
    from trn_tutorials.cli import run
    bodies = sent_bodies()
    try:
        queue(moto_server, [{'label': 'score', 'score': 4.25}, {'label': 'score', 'score': -0.5}])
        run(['sm-predict', '--endpoint_name', 'ep', '--text', 'the cat sat', 'i am scared', '--text_pair', 'a cat sat', 'what might happen'])
        assert bodies[-1] == {'inputs': [{'text': 'the cat sat', 'text_pair': 'a cat sat'}, {'text': 'i am scared', 'text_pair': 'what might happen'}]}
        assert [l.split() for l in capsys.readouterr().out.splitlines()] == [
            ['score', '4.250', 'the', 'cat', 'sat', '||', 'a', 'cat', 'sat'], ['score', '-0.500', 'i', 'am', 'scared', '||', 'what', 'might', 'happen']]
        queue(moto_server, [{'labels': ['joy', 'love'], 'scores': {'anger': 0.01, 'joy': 0.91, 'love': 0.62}}, {'labels': [], 'scores': {'anger': 0.2}}])
        run(['sm-predict', '--endpoint_name', 'ep', '--text', 'i feel so happy', 'meh'])
        assert bodies[-1] == {'inputs': ['i feel so happy', 'meh']}
        out = capsys.readouterr().out.splitlines()
        assert out[0].split() == ['joy', '0.910,', 'love', '0.620', 'i', 'feel', 'so', 'happy'] and out[1].split() == ['(no', 'label)', 'meh']
        queue(moto_server, [{'label': 'joy', 'score': 0.9}])
        run(['sm-predict', '--endpoint_name', 'ep', '--text', 'i feel great'])
        assert capsys.readouterr().out.split() == ['joy', '0.900', 'i', 'feel', 'great']
        n = len(bodies)
        with pytest.raises(SystemExit) as e: run(['sm-predict', '--endpoint_name', 'ep', '--text', 'a', 'b', '--text_pair', 'c'])
        err = capsys.readouterr().err
        assert e.value.code == 2 and err.count('\n') == 1 and '--text_pair has 1 text(s) for 2 --text: pass one --text_pair per --text' in err
        assert len(bodies) == n   # refused before any call
    finally: boto3.DEFAULT_SESSION = None
    from trn_tutorials.cli import PredictArguments
    from trn_tutorials.core import parse_args
    assert parse_args([PredictArguments], ['--text', 'a', '--text_pair', 'b'])[0].text_pair == ['b']
