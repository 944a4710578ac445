"Turn the carried fp16 MiniLM into an fp32 model folder (the same weights, rounded to fp16 once)."
import shutil, sys
from pathlib import Path
from safetensors.torch import load_file, save_file
src, dst = Path(sys.argv[1]), Path(sys.argv[2])
dst.mkdir(parents=True, exist_ok=True)
for f in src.iterdir():
    if f.name != 'model16.safetensors': shutil.copy(f, dst/f.name)
save_file({k: (v.float() if v.is_floating_point() else v).contiguous() for k, v in load_file(src/'model16.safetensors').items()},
          dst/'model.safetensors', metadata={'format': 'pt'})
print('model', dst)
