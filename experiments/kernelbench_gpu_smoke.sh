#!/usr/bin/env bash
# One device call: `workbench kernelbench` on a GPU over two tiny KernelBench-format files (the search, full timing
# against eager and torch.compile, the report), then the same run again (resume: nothing redone). Outputs under $OUT.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 WORKBENCH_HOME=/tmp/wbhome
mkdir -p "$OUT" /tmp/kb/level1
python3 - <<'PY'
import re, pathlib
src = pathlib.Path("tests/test_kernelbench.py").read_text()
for name, fname in (("RELU", "1_relu.py"), ("NOT_KERNELBENCH", "2_not_kernelbench.py")):
    body = re.search(name + r' = """(.*?)"""', src, re.S).group(1)
    pathlib.Path("/tmp/kb/level1", fname).write_text(body.replace("16384 * 2", "4096"))
PY
timeout 400 python3 -m workbench.cli kernelbench /tmp/kb --device cuda --budget-gpu-s ${BUDGET:-5} --out "$OUT/run" \
  --store /tmp/kb.sqlite > "$OUT/first.txt" 2> "$OUT/first.err"
echo "rc $?"
timeout 120 python3 -m workbench.cli kernelbench /tmp/kb --device cuda --budget-gpu-s ${BUDGET:-5} --out "$OUT/run" \
  --store /tmp/kb.sqlite > "$OUT/second.txt" 2> "$OUT/second.err"
echo "rc $?"
cat "$OUT/first.txt" "$OUT/second.err"; tail -5 "$OUT/first.err"
