#!/usr/bin/env bash
# Installs what building and testing kepler-rs needs on a fresh Debian 12 machine. Idempotent:
# packages already present are not reinstalled.
set -euo pipefail

packages=(
  prometheus   # promtool and a real server that scrapes the agent in tests
  stress-ng    # the CPU workload the end-to-end tests attribute power to
  clang llvm libbpf-dev bpftool  # rebuilding and checking the committed eBPF object
  util-linux   # setpriv, to run the agent without capabilities in tests; prlimit for fd limits
  curl         # client-certificate tests speak to the TLS endpoints as a user would
  ipmitool openipmi  # the ipmi meter's tool, and ipmi_sim (an RMCP+ BMC simulator) for its tests
  python3-venv # a venv for sushy-tools (Redfish emulator) in the redfish tests
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true
# Redfish emulators (sushy-static, sushy-emulator) for crates/meters/tests/redfish_sushy.rs,
# in a venv of the checkout (gitignored).
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ ! -x "$root/.venv-sushy/bin/sushy-static" ]; then
  python3 -m venv "$root/.venv-sushy"
  "$root/.venv-sushy/bin/pip" install -q sushy-tools
fi
# Helm (its Go library, shipped in the helm-sdkpy wheel; no registry here ships the CLI) and
# the Kubernetes schemas, for deploy/helm/render.py and bins/kepler/tests/helm_chart.rs. The
# wheel declares Python >= 3.12 for its bindings, which render.py does not use (it loads the
# library with ctypes), so it installs on Debian 12's 3.11 without its dependencies.
if ! "$root/.venv-helm/bin/python" -c 'import kubernetes_validate, yaml, importlib.util as u; assert u.find_spec("helm_sdkpy")' 2>/dev/null; then
  python3 -m venv "$root/.venv-helm"
  "$root/.venv-helm/bin/pip" install -q kubernetes-validate==1.37.0 PyYAML==6.0.4
  "$root/.venv-helm/bin/pip" install -q --no-deps --ignore-requires-python helm-sdkpy==0.1.32
fi
