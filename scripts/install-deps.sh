#!/usr/bin/env bash
# Installs the Debian packages shardplan builds with, only those missing.
# Idempotent; prints nothing when everything is already present.
set -euo pipefail

packages=(
  cmake ninja-build g++ make pkg-config
  libcli11-dev nlohmann-json3-dev libfmt-dev libspdlog-dev catch2
  libsimdjson-dev libre2-dev libyaml-cpp-dev clang-format
  clang-tidy            # make tidy (part of make test)
  clang libclang-rt-dev  # the fuzz preset: clang and libFuzzer's runtime
  python3 python3-yaml  # the paste-back round trip (tests/paste_back/)
  chromium              # the HTML reports' browser test (tests/browser/)
)

missing=()
for pkg in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >&2
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
