"One declaration per option: inline comments are the help of --help, of help() and of the docs page; `arguments_of` builds options from a function."
from dataclasses import asdict, dataclass, field

import pytest

from trn_tutorials.core import Limit, UsageError, arguments_of, documented, field_help, parse_args


@documented
@dataclass
class _Opts:
    "Options for a test."
    steps: int = 10 # optimizer steps
    # a comment above the field is its help too
    rate: float = 0.5
    name: str = field(default='x', metadata={'help': 'from metadata'})
    plain: bool = False


def _fn(steps:int=3, # how many steps; 100% of them
        names:list[str]=[], # texts to read
        label:str|None=None, # an optional label
        **kw):
    "Run `steps` steps."
    return steps, names, label, kw


def _to(a:int=1, # passed on through **kw
        b:str='b'): pass


def test_field_help_reads_comments_and_metadata():
    assert field_help(_Opts) == {'steps': 'optimizer steps', 'rate': 'a comment above the field is its help too', 'name': 'from metadata', 'plain': None}


def test_documented_puts_the_help_where_show_doc_reads_it():
    from fastcore.docments import docments
    assert docments(_Opts)['steps'] == 'optimizer steps'
    assert _Opts.__doc__.startswith('Options for a test.')


def test_help_text_has_each_comment(capsys):
    with pytest.raises(SystemExit): parse_args([_Opts], ['--help'], prog='t')
    out = ' '.join(capsys.readouterr().out.split())
    assert 'optimizer steps' in out and 'a comment above the field is its help too' in out


def test_arguments_of_a_function():
    A = arguments_of(_fn, {'steps': Limit(1, example=3)}, to=_to, name='RunArguments')
    assert A.__name__ == 'RunArguments' and A.__module__ == __name__
    assert field_help(A) == {'steps': 'how many steps; 100% of them', 'names': 'texts to read', 'label': 'an optional label', 'a': 'passed on through **kw', 'b': None}
    a, = parse_args([A], ['--steps', '5', '--names', 'x', 'y', '--a', '2'])
    assert _fn(**asdict(a)) == (5, ['x', 'y'], None, {'a': 2, 'b': 'b'})
    assert A().names == [] and A().names is not A().names
    with pytest.raises(UsageError, match='--steps 0 is out of range'): A(steps=0)
    with pytest.raises(SystemExit): parse_args([A], ['--help'])   # a '%' in a comment does not break --help
