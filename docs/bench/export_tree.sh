#!/usr/bin/env bash
# Export the package as it was at a commit under another name (welchpeaks_<rev>), so that it can
# be timed in the same process as the working tree (docs/bench/overhead_vs.py --rev REV).
#   bash docs/bench/export_tree.sh cc6b438 /tmp/oldwp   ->   PYTHONPATH=/tmp/oldwp
set -euo pipefail
rev=${1:-cc6b438}
dir=${2:-/tmp/oldwp}
pkg=welchpeaks_$rev
mkdir -p "$dir"
rm -rf "$dir/$pkg" "$dir/src"
git archive "$rev" src/welchpeaks | tar -x -C "$dir"
mv "$dir/src/welchpeaks" "$dir/$pkg"
rm -rf "$dir/src"
grep -rl welchpeaks "$dir/$pkg" --include=*.py | xargs sed -i -E \
  -e "s/^(\s*)import welchpeaks$/\1import $pkg as welchpeaks/" \
  -e "s/^(\s*)from welchpeaks import/\1from $pkg import/" \
  -e "s/^(\s*)(from|import) welchpeaks\./\1\2 $pkg./" \
  -e "s/\"welchpeaks\.(backends|plan|learned|ir)\b/\"$pkg.\1/g"
echo "$dir/$pkg"
