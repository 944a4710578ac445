#!/usr/bin/env bash
# Run every test: the notebooks (nbdev_test), nbdev's doc preprocessing on a clean copy (the site's first build
# step), pytest (torchrun, CLI, servers, the docs' outputs and workflows), the training tests again with
# transformers 4.57.x (the optimum-neuron pin), the XLA rehearsal (the Neuron code path on PJRT's CPU
# device, in its own environment with the Neuron 2.31 DLAMI's versions), and a Python 3.10 compile check.
# Ends with one line `N passed, N failed`; exits non-zero if anything failed or nothing ran.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
passed=0; failed=0
count() { passed=$((passed + $1)); failed=$((failed + $2)); }
pytest_counts() {  # the numbers in pytest's summary line, from a junit xml file
  "$BIN/python" - "$1" <<'PY'
import sys, xml.etree.ElementTree as ET
try: r = ET.parse(sys.argv[1]).getroot()
except Exception: print(0, 1); sys.exit()
s = r if r.tag == 'testsuite' else r.find('testsuite')
t, f, e, sk = (int(s.get(k, 0)) for k in ('tests', 'failures', 'errors', 'skipped'))
print(t - f - e - sk, f + e)
PY
}
export HF_HUB_DISABLE_TELEMETRY=1 TOKENIZERS_PARALLELISM=false
export PATH="$PWD/$BIN:$PATH"   # notebook cells call `torchrun` and `trn-tutorials`
tmp=$(mktemp -d)

if [ -f .ci/services.sh ]; then bash .ci/services.sh .venv || { echo "services setup failed"; count 0 1; }; fi

echo "== notebooks (nbdev_test) =="
nbs=$(ls nbs/[0-9]*.ipynb nbs/index.ipynb 2>/dev/null)
"$BIN/nbdev_test" --n_workers 2 --do_print 2>&1 | tee "$tmp/nbdev.log"
nfail=$(awk '/nbdev Tests Failed On The Following Notebooks/{f=1;next} f&&/\.ipynb/{n++} END{print n+0}' "$tmp/nbdev.log")
ntotal=$(echo "$nbs" | wc -w)
count $((ntotal - nfail)) "$nfail"

echo "== docs: nbdev's doc preprocessing (what nbdev_docs runs before Quarto), on a clean copy =="
# The files a fresh clone would hold once the working tree is committed (tracked and new, nothing ignored: no
# runs/, no _proc/), processed from that copy's root as the deploy workflow does. nbdev.serve.proc_nbs is the
# processing alone (nbdev_proc_nbs would first download Quarto). Any error, and any warning (such as "Found cells
# containing imports and other code", a cell nbdev re-runs without the cells before it), fails the stage.
# The processed notebooks are left in _proc/ (ignored by git) to look at.
D="$tmp/docs"; mkdir -p "$D"
git ls-files -z --cached --others --exclude-standard | tar --null -T - --ignore-failed-read -cf - 2>/dev/null | tar -xf - -C "$D"
py="$PWD/$BIN/python"
(cd "$D" && PYTHONPATH="$D" "$py" -c "from nbdev.serve import proc_nbs; proc_nbs(force=True)") > "$tmp/docs.log" 2>&1
rc=$?
rm -rf _proc && { [ ! -d "$D/_proc" ] || mv "$D/_proc" _proc; }
if [ $rc -eq 0 ] && ! grep -Eq 'Warning|Error|Traceback|Exception' "$tmp/docs.log"; then
  echo "ok: $(ls _proc/*.ipynb | wc -l) notebooks processed, no warning"; count 1 0
else
  cat "$tmp/docs.log"; echo "FAILED: nbdev's doc preprocessing (exit $rc; warnings and errors above)"; count 0 1
fi

echo "== pytest =="
"$BIN/python" -m pytest -q -p no:cacheprovider --junitxml "$tmp/pytest.xml" tests
count $(pytest_counts "$tmp/pytest.xml")

echo "== training with transformers 4.57 (the optimum-neuron / DLAMI line) =="
C=.venv-compat
if [ ! -x $C/bin/python ]; then python3 -m venv $C && $C/bin/pip install -q ${TORCH:-torch==2.13.0}; fi
$C/bin/pip install -q -e ".[dev]" "${COMPAT_TRANSFORMERS:-transformers==4.57.*}" \
  && $C/bin/python -c "import transformers; print('transformers', transformers.__version__)" \
  && $C/bin/python -m pytest -q -p no:cacheprovider --junitxml "$tmp/compat.xml" tests/test_train.py tests/test_train_checks.py tests/test_chaos.py
count $(pytest_counts "$tmp/compat.xml")

echo "== XLA rehearsal: torch 2.9 + torch-xla 2.9 + transformers 4.57 (the Neuron 2.31 DLAMI's stack) =="
X=.venv-xla   # PyPI's torch 2.9 is the CUDA build: it imports only with its nvidia-* wheels (about 3.4 GB)
if [ ! -x $X/bin/python ]; then python3 -m venv $X && $X/bin/pip install -q --upgrade pip; fi
# one resolve, the stack pinned in it: installed apart, the package's newest datasets would pull transformers 5; large wheels resume after a dropped connection
$X/bin/pip install -q --resume-retries 20 ${XLA_STACK:-torch==2.9.0 torch-xla==2.9.0 transformers==4.57.6} -e . pytest \
  && $X/bin/python -c "import torch, torch_xla, transformers; print('torch', torch.__version__, 'torch-xla', torch_xla.__version__, 'transformers', transformers.__version__)" \
  && PATH="$PWD/$X/bin:$PATH" $X/bin/python -m pytest -q -p no:cacheprovider --junitxml "$tmp/xla.xml" tests/test_xla.py
count $(pytest_counts "$tmp/xla.xml")
grep -q 'skipped="[1-9]' "$tmp/xla.xml" 2>/dev/null && { echo "FAILED: the XLA rehearsal was skipped"; count 0 1; }

echo "== Python 3.10 compiles the package =="
py310=$(ls ~/.pyenv/versions/3.10*/bin/python 2>/dev/null | head -1)   # the DLAMI's Python line
[ -n "$py310" ] || py310=$(command -v python3.10 || true)
if [ -n "$py310" ] && "$py310" -m compileall -q trn_tutorials tests; then echo "ok: $py310"; count 1 0
else echo "FAILED: no Python 3.10 found or the package does not compile under it"; count 0 1; fi

echo
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
