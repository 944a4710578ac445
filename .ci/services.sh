#!/usr/bin/env bash
# Install what tests/test_instance.py, tests/test_ssh.py and the setup/ssh/cleanup notebooks need on a fresh
# Debian machine, as root:
#   - OpenSSH server and client (a real sshd on 127.0.0.1 stands in for the instance),
#   - a Java runtime for multi-model-server (the model server SageMaker's PyTorch containers run; tests/test_inference.py),
#   - moto's server (the AWS APIs on 127.0.0.1), boto3 and jupyter_server, into the venv given as $1.
# Usage: bash .ci/services.sh .venv
set -euo pipefail
VENV=${1:?usage: bash .ci/services.sh VENV_DIR}
[ -x "$VENV/bin/pip" ] || { echo "services.sh: no pip in $VENV/bin (create the venv first)" >&2; exit 2; }
need=()
if [ ! -x /usr/sbin/sshd ] || ! command -v ssh >/dev/null || ! command -v ssh-keygen >/dev/null; then need+=(openssh-server openssh-client); fi
command -v java >/dev/null || need+=(default-jre-headless)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then echo "services.sh: run as root to install ${need[*]} (apt-get)" >&2; exit 2; fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
mkdir -p /run/sshd 2>/dev/null || true      # sshd's privilege-separation folder (the tests create it too)
"$VENV/bin/pip" install -q 'moto[server]>=5.0' 'boto3>=1.34' 'jupyter_server>=2.0'
"$VENV/bin/python" -c "import moto, boto3, jupyter_server" && test -x "$VENV/bin/moto_server"
echo "services.sh: sshd $(/usr/sbin/sshd -V 2>&1 | head -1 || true); $(java -version 2>&1 | head -1); $("$VENV/bin/python" -c 'import moto, boto3, jupyter_server; print(f"moto {moto.__version__}, boto3 {boto3.__version__}, jupyter_server {jupyter_server.__version__}")')"
