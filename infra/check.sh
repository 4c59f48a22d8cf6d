#!/usr/bin/env bash
# Offline checks of infra/: run from the repository root as `bash infra/check.sh`.
#
#   tofu-fmt        OpenTofu `fmt -check` of infra/terraform and infra/render-test
#   user-data       the bootstrap templates rendered by OpenTofu (infra/render-test), `bash -n`
#                   on every rendered script and on infra/ray/node-setup.sh
#   hcl-rules       infra/check_terraform.py (python-hcl2): variables, references, pinning,
#                   credentials, S3 versioning/public access block, IMDSv2, template variables
#   checkov         checkov -d infra/terraform (skips named, with reasons, in .checkov.yaml)
#   ray-config      infra/ray/cluster.yaml through Ray's own prepare_config + validate_config
#   promtool        check config (also with the sample file_sd targets), check rules, test rules
#   dashboard       infra/check_dashboard.py: the Grafana JSON and the rules use only metrics
#                   that pipeline/metrics.py exports
#
# Tools are cached under ${XDG_CACHE_HOME:-$HOME/.cache}/rechain: OpenTofu built from the Go module
# proxy (about 5-10 minutes the first time), one venv with python-hcl2 and one with checkov
# (python3.11; separate because checkov ships its own fork of the hcl2 module). promtool comes
# from Debian's `prometheus` package, installed with apt-get when missing (needs root).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/rechain"
TOFU_VERSION=1.8.8
TOFU="$CACHE/tofu-$TOFU_VERSION"
HCL_VENV="$CACHE/venv-infra-hcl2"
HCL_PKGS=("python-hcl2==8.1.4" "PyYAML==6.0.2")
CHECKOV_VENV="$CACHE/venv-infra-checkov"
CHECKOV_PKGS=("checkov==3.3.30")
PY=${PY:-python3.11}

# OpenTofu reads no user CLI configuration here (and warns about none).
TF_CLI_CONFIG_FILE=$(mktemp)
export TF_CLI_CONFIG_FILE TF_IN_AUTOMATION=1 CHECKPOINT_DISABLE=1
WORK=$(mktemp -d)
trap 'rm -rf "$WORK" "$TF_CLI_CONFIG_FILE"' EXIT
mkdir -p "$CACHE"

NAMES=()
STATUS=()
TIMES=()
FAILED=0

# step NAME FUNCTION: runs FUNCTION with its output indented; records pass/fail and time.
step() {
  local name=$1 fn=$2 start rc
  start=$(date +%s)
  echo "== $name"
  # errexit is off around the subshell (to record its status) and on again inside it.
  set +e
  (
    set -e
    "$fn"
  ) >"$WORK/$name.log" 2>&1
  rc=$?
  set -e
  sed 's/^/   /' "$WORK/$name.log"
  NAMES+=("$name")
  TIMES+=("$(($(date +%s) - start))s")
  if [ "$rc" -eq 0 ]; then
    STATUS+=("PASS")
  else
    STATUS+=("FAIL")
    FAILED=$((FAILED + 1))
  fi
}

# ---------------------------------------------------------------------------- tools

ensure_tofu() {
  if [ -x "$TOFU" ] && "$TOFU" version 2>/dev/null | grep -q "^OpenTofu v$TOFU_VERSION$"; then
    return 0
  fi
  command -v go >/dev/null || { echo "go is needed to build OpenTofu $TOFU_VERSION" >&2; return 1; }
  echo "building OpenTofu $TOFU_VERSION from the Go module proxy (cached as $TOFU) ..."
  local json dir src
  json=$(cd "$WORK" && GOFLAGS=-mod=mod go mod download -json "github.com/opentofu/opentofu@v$TOFU_VERSION")
  dir=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
  [ -d "$dir" ] || { echo "go mod download gave no module folder: $json" >&2; return 1; }
  src="$WORK/opentofu-src"
  cp -r "$dir" "$src"
  chmod -R u+w "$src"
  (cd "$src" && CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X github.com/opentofu/opentofu/version.dev=no" -o "$TOFU.tmp" ./cmd/tofu)
  mv "$TOFU.tmp" "$TOFU"
  "$TOFU" version
}

# ensure_venv DIR PACKAGE...: a python3.11 venv with exactly these pins (stamped), reused.
ensure_venv() {
  local dir=$1
  shift
  local stamp="$dir/.rechain-infra-$(printf '%s\n' "$@" | sha256sum | cut -c1-16)"
  [ -f "$stamp" ] && return 0
  command -v "$PY" >/dev/null || { echo "$PY is needed for the infra checkers" >&2; return 1; }
  rm -rf "$dir"
  "$PY" -m venv "$dir"
  "$dir/bin/pip" install -q --disable-pip-version-check "$@"
  touch "$stamp"
}

ensure_promtool() {
  command -v promtool >/dev/null && return 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "promtool is missing: install Debian's prometheus package (apt-get install prometheus)" >&2
    return 1
  fi
  echo "installing Debian's prometheus package for promtool ..."
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q prometheus >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q prometheus >/dev/null; }
  command -v promtool >/dev/null
}

tools() {
  ensure_tofu
  ensure_venv "$HCL_VENV" "${HCL_PKGS[@]}"
  echo "python-hcl2: $("$HCL_VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("python-hcl2"))')"
  ensure_venv "$CHECKOV_VENV" "${CHECKOV_PKGS[@]}"
  echo "checkov: $("$CHECKOV_VENV/bin/checkov" --version)"
  ensure_promtool
  promtool --version 2>&1 | head -1
}

# ---------------------------------------------------------------------------- checks

check_tofu_fmt() {
  "$TOFU" fmt -check -diff -recursive infra/terraform
  "$TOFU" fmt -check -diff -recursive infra/render-test
  echo "formatted: $(find infra/terraform infra/render-test -name '*.tf' | wc -l) files"
}

check_user_data() {
  local dir="$WORK/render"
  mkdir -p "$dir"
  cp infra/render-test/main.tf "$dir/"
  "$TOFU" -chdir="$dir" init -input=false -no-color >/dev/null
  "$TOFU" -chdir="$dir" apply -auto-approve -input=false -no-color \
    -var "templates=$ROOT/infra/terraform/templates" >"$dir/apply.log" \
    || { cat "$dir/apply.log"; return 1; }
  "$TOFU" -chdir="$dir" output -json scripts >"$dir/scripts.json"
  "$HCL_VENV/bin/python" - "$dir" <<'PY'
import json, pathlib, sys
d = pathlib.Path(sys.argv[1])
for name, text in json.loads((d / "scripts.json").read_text()).items():
    (d / f"{name}.sh").write_text(text)
PY
  local f n=0
  for f in "$dir"/*.sh infra/ray/node-setup.sh; do
    bash -n "$f"
    n=$((n + 1))
  done
  echo "rendered and parsed $n bootstrap scripts"
}

check_hcl_rules() {
  "$HCL_VENV/bin/python" infra/check_terraform.py infra/terraform
}

check_checkov() {
  "$CHECKOV_VENV/bin/checkov" -d infra/terraform --quiet --compact --skip-download \
    --config-file infra/terraform/.checkov.yaml
}

check_ray_config() {
  local py
  if [ -x .venv/bin/python ] && .venv/bin/python -c 'import ray' 2>/dev/null; then
    py=.venv/bin/python
  else
    echo "no project .venv with ray: installing ray into $HCL_VENV"
    "$HCL_VENV/bin/pip" install -q --disable-pip-version-check "ray>=2.40"
    py="$HCL_VENV/bin/python"
  fi
  "$py" - infra/ray/cluster.yaml <<'PY'
import copy, logging, sys
import yaml
import ray
from ray.autoscaler._private.util import prepare_config, validate_config

logging.disable(logging.INFO)
raw = yaml.safe_load(open(sys.argv[1]))
config = prepare_config(copy.deepcopy(raw))
validate_config(config)
types = config["available_node_types"]
assert config["provider"]["type"] == "aws", "provider must be aws"
assert config["head_node_type"] in types
workers = [t for t in types if t != config["head_node_type"]]
assert workers, "no worker node type"
for name, t in types.items():
    assert t["node_config"]["InstanceType"].split(".")[0][-1] == "d" or t["node_config"]["InstanceType"].startswith(("i3", "i4", "im4gn", "is4gen")), f"{name} is not an NVMe instance type"
print(f"valid for Ray {ray.__version__}: head {config['head_node_type']}, workers {', '.join(workers)}")
PY
}

check_promtool() {
  promtool check config --lint=all infra/prometheus/prometheus.yml
  promtool check rules --lint=all infra/prometheus/rules.yml
  promtool test rules infra/prometheus/rules_test.yml
  # The same configuration with the sample targets in place: promtool then parses the file_sd files.
  local dir="$WORK/prometheus"
  mkdir -p "$dir/targets"
  cp infra/prometheus/prometheus.yml infra/prometheus/rules.yml "$dir/"
  cp infra/prometheus/targets.sample/*.json "$dir/targets/"
  promtool check config "$dir/prometheus.yml" 2>&1 | tee "$dir/out.log"
  if grep -q WARNING "$dir/out.log"; then
    echo "the sample targets do not match the file_sd patterns" >&2
    return 1
  fi
}

check_dashboard() {
  "$HCL_VENV/bin/python" infra/check_dashboard.py pipeline/metrics.py \
    infra/grafana/rechain-dashboard.json infra/prometheus/rules.yml
}

# ---------------------------------------------------------------------------- run

T0=$(date +%s)
step tools tools
if [ "$FAILED" -ne 0 ]; then
  echo "infra check: the tools could not be set up" >&2
  exit 1
fi
step tofu-fmt check_tofu_fmt
step user-data check_user_data
step hcl-rules check_hcl_rules
step checkov check_checkov
step ray-config check_ray_config
step promtool check_promtool
step dashboard check_dashboard

echo
echo "infra check summary"
for i in "${!NAMES[@]}"; do
  printf '  %-4s %-11s %s\n' "${STATUS[$i]}" "${NAMES[$i]}" "${TIMES[$i]}"
done
echo "  total $(($(date +%s) - T0))s"
if [ "$FAILED" -ne 0 ]; then
  echo "infra check: $FAILED check(s) FAILED"
  exit 1
fi
echo "infra check: all passed"
