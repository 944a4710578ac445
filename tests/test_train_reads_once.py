"A run reads its prepared data once: `_prepare` loads it and hands it to the space check and to `resume_from`."
import trn_tutorials.train as T
import trn_tutorials.checkpoints as K
from trn_tutorials.arguments import TrainArguments


def test_prepared_data_read_once(prepared, tmp_path, monkeypatch):
    "A resumed run (the path that checks the checkpoint's step count against the data) reads the prepared folder once."
    for k in ('RANK', 'WORLD_SIZE', 'LOCAL_RANK'): monkeypatch.delenv(k, raising=False)
    args = TrainArguments(dataset_path=str(prepared/'data'), output_dir=str(tmp_path/'model'), max_steps=2, save_steps=2,
                          logging_steps=1, backend='cpu')
    T.train(args)   # leaves checkpoint-2: the same arguments again resume from it
    calls, real = [], T.load_prepared
    def counting(path):
        calls.append(path); return real(path)
    monkeypatch.setattr(T, 'load_prepared', counting); monkeypatch.setattr(K, 'load_prepared', counting)
    backend, ds, manifest, start, few_steps, data = T._prepare(args)
    assert backend == 'cpu' and start is not None and start.name == 'checkpoint-2'
    assert calls == [str(prepared/'data')], calls
