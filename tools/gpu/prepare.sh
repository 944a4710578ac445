# Fill .gpu/ (ignored by git: add `/.gpu/` to .git/info/exclude) with what tools/gpu/run.sh needs on a lent GPU machine that
# reaches no registry: the wheels its image lacks (for its Python 3.12), MiniLM's weights in fp16 (under the 64 MiB a call
# carries; run.sh turns them back into fp32) and the emotion files. Then, through the device tool:
#   run(command="bash tools/gpu/run.sh", carry=[".gpu"])  with OUT set by the tool.
# Prepared on 2026-11-27 and not yet run on a GPU: no machine was lent that session.
set -eu
mkdir -p .gpu/wheels .gpu/wheels44 .gpu/minilm16
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
dl() { .venv/bin/pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
         --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 -d "$@"; }
dl .gpu/wheels datasets==5.2.0 fastcore==1.14.5 rapidfuzz==3.14.6 dill==0.4.1 multiprocess==0.70.19 xxhash==4.1.0 fsspec==2026.9.0
dl .gpu/wheels44 datasets==4.4.1 dill==0.4.0 multiprocess==0.70.18 fsspec==2025.10.0   # for an image whose pyarrow is older than 24
M=$(.venv/bin/python -c "from trn_tutorials.models import local_model; print(local_model())")
cp "$M"/config.json "$M"/tokenizer.json "$M"/tokenizer_config.json "$M"/vocab.txt "$M"/special_tokens_map.json .gpu/minilm16/
.venv/bin/python -c "
from safetensors.torch import load_file, save_file
sd = load_file('$M/model.safetensors')
save_file({k: (v.half() if v.is_floating_point() else v).contiguous() for k, v in sd.items()}, '.gpu/minilm16/model16.safetensors', metadata={'format': 'pt'})"
cp tools/gpu/up.py .gpu/up.py
mkdir -p .gpu/emotion && cp ../shared/data/emotion/*.txt .gpu/emotion/   # research licence: carried to the lent machine, never committed
du -sh .gpu
