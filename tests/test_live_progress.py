"`trn_tutorials.training.live_progress`: the progress bar and table a launch shows, in a terminal and in a notebook."
from fastcore.test import test_eq as eq

from trn_tutorials.training.live_progress import Progress
from trn_tutorials.training.progress import progress_line


def run_lines(p: Progress):
    for line in [progress_line('begin', step=0, max_steps=4, num_train_epochs=2), 'some worker log line',
                 progress_line('step', step=2, epoch=1.0), progress_line('log', step=2, loss=1.7),
                 progress_line('eval', step=2, epoch=1.0, loss=1.6, f1=0.25, accuracy=0.5),
                 progress_line('note', text='resuming from checkpoint-2'),
                 progress_line('step', step=4, epoch=2.0), progress_line('eval', step=4, epoch=2.0, loss=1.4, f1=0.5, accuracy=0.75),
                 progress_line('end', step=4)]:
        yield line, p(line)


def test_progress_in_a_terminal(capsys):
    p = Progress(notebook=False)
    taken = [t for _, t in run_lines(p)]
    p.close()
    eq(taken, [True, False, True, True, True, True, True, True, True])   # the worker's own line is left to `stream`
    out, err = capsys.readouterr()
    assert 'Epoch 1  Training Loss 1.7000  Validation Loss 1.6000  F1 0.2500  Accuracy 0.5000' in out + err
    assert 'resuming from checkpoint-2' in out + err and '4/4' in err


def test_progress_in_a_notebook(monkeypatch):
    shown = []
    import IPython.display as disp
    class Handle:
        def update(self, obj): shown.append(obj.data)
    monkeypatch.setattr(disp, 'display', lambda obj, display_id=None: (shown.append(obj.data), Handle())[1])
    p = Progress(notebook=True)
    for _ in run_lines(p): pass
    html = shown[-1]
    assert '<progress' in html and '4/4' in html
    for cell in ('Training Loss', 'Validation Loss', '0.2500', '0.7500', '1.4000'): assert cell in html
