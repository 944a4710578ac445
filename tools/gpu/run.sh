# The GPU checks: the CUDA path end to end (the quickstart on the real emotion files) and the pair benchmark.
# Prepared with tools/gpu/prepare.sh; not yet run on a GPU (none was lent on 2026-11-27).
# Local rehearsal: PY=.venv/bin/python LOCAL=1 QDATA=trn_tutorials/samples/emotion PAIRS=64 EPOCHS=1 SEEDS=42 BF16= OUT=/tmp/gpu-out bash tools/gpu/run.sh
set -u
PY=${PY:-python3}; PAIRS=${PAIRS:-4000}; EPOCHS=${EPOCHS:-3}; SEEDS=${SEEDS:-42 43 44}; BF16=${BF16---bf16}
BIN=$(dirname $($PY -c 'import sys; print(sys.executable)'))
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
mkdir -p $OUT
{
$PY -c "import torch, transformers, pyarrow, numpy; print('torch', torch.__version__, 'transformers', transformers.__version__, 'pyarrow', pyarrow.__version__, 'numpy', numpy.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no cuda')"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null
if [ -z "${LOCAL:-}" ]; then
  if $PY -c "import pyarrow, sys; sys.exit(int(pyarrow.__version__.split('.')[0]) < 24)"; then WH=".gpu/wheels/*.whl"
  else WH=".gpu/wheels44/*.whl .gpu/wheels/fastcore* .gpu/wheels/rapidfuzz* .gpu/wheels/xxhash*"; fi
  $PY -m pip install -q --no-deps --no-index $WH 2>&1 | tail -3
  $PY -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
  if [ ! -x $BIN/trn-tutorials ]; then   # no setuptools to build with: the console script by hand
    printf '#!/bin/sh\nPYTHONPATH=%s exec %s -c "import sys; sys.argv[0] = \"trn-tutorials\"; from trn_tutorials.cli import main; main()" "$@"\n' "$PWD" "$PY" > $BIN/trn-tutorials
    chmod +x $BIN/trn-tutorials; export PYTHONPATH=$PWD; echo "console script written by hand"
  fi
  $PY -c "import datasets, fastcore, trn_tutorials; print('datasets', datasets.__version__, 'fastcore', fastcore.__version__, 'trn_tutorials', trn_tutorials.__version__)"
fi
$PY tools/gpu/up.py .gpu/minilm16 /tmp/minilm
} > $OUT/setup.log 2>&1
tail -5 $OUT/setup.log
# 1. the CUDA path end to end: the reader's quickstart on the real emotion data
t0=$(date +%s)
timeout 200 $BIN/trn-tutorials quickstart --data ${QDATA:-.gpu/emotion} --model_id /tmp/minilm --dataset_path /tmp/q/data --output_dir /tmp/q/out \
    --num_train_epochs $EPOCHS ${BF16:+--bf16 true} > $OUT/quickstart.log 2>&1
echo "quickstart rc=$? in $(( $(date +%s) - t0 )) s"; tr "\r" "\n" < $OUT/quickstart.log | grep -v "step/s\|it/s\|^ *$" | tail -25 | cut -c1-300
cp /tmp/q/out/metrics.json $OUT/quickstart_metrics.json 2>/dev/null
# 2. run_glue's recipe beside the project on a pair task
t0=$(date +%s)
timeout ${BENCH_S:-420} $PY benchmarks/bench_pairs.py --task emotion-pairs --data .gpu/emotion --pairs $PAIRS --model /tmp/minilm --out /tmp/bp --seeds $SEEDS \
    --epochs $EPOCHS $BF16 --results $OUT/results.json > $OUT/pairs.log 2>&1
echo "pairs rc=$? in $(( $(date +%s) - t0 )) s"; grep '^{"setting' $OUT/pairs.log; tail -5 $OUT/pairs.log | cut -c1-600
cp /tmp/bp/results.json $OUT/pairs.json 2>/dev/null
