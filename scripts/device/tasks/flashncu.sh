# shellcheck shell=bash disable=SC2034,SC2154  # sourced by scripts/device/run.sh, which sets the rest
# flashncu [--short] [--candidate DIR|FILE.patch]: Nsight Compute's full set on one launch of the flash attention's
# backward at 4 x 2048 (xlarge, bf16, dropout 0.1; zt_bench --only attention_backward_flash) or, with --short, of
# the stored path's one-kernel forward at 40 x 128 (--only attention_forward), for issue 39: where its issue
# slots and stalls go by SASS instruction, and the L2 traffic of its reductions. The launch profiled is the fifth
# of the kernel (one validation call at small dims, then three warm-ups: the first at 4 x 2048; the grid size in
# the summary says so). Outputs (per tree): ncu_<tree>_details.csv (every section), ncu_<tree>_source.csv.gz
# (instructions executed, warp stall samples by SASS line), ncu_<tree>_raw.csv.gz (every metric); the headline
# metrics, the instructions and stall samples by opcode and by the code between barriers
# (scripts/ncu_source_summary.py [--by-barrier]) in the summary. With --candidate the same for that tree (built
# beside into build-gpu-candidate/, as long's candidate), so the two kernels' figures sit side by side. ~120 s to
# build zt_bench on a fresh H100 (a candidate beside it), then ~20 s of replays a tree (2026-12-07: both trees in
# 39 s on a warm machine). One call:
#   run(carry=[".device-deps"(, ".plan")], timeout_s=420): scripts/device/run.sh flashncu [--candidate .plan/NAME.patch]
targets=(zt_bench)
ncu_kernel=flash_attention_backward_kernel ncu_bench=(--only attention_backward_flash --batch 4 --seq 2048) ncu_skip=4
task_args() {
  while (($#)); do
    case $1 in
    --short)
      # The validation call's heads of 16 do not run it: the 4th launch is the first timed one.
      ncu_kernel=short_attention_forward_kernel ncu_bench=(--only attention_forward --batch 40 --seq 128) ncu_skip=3
      ;;
    --candidate)
      candidate_tree "${2:-}"
      shift
      ;;
    *) refuse "flashncu takes [--short] [--candidate DIR|FILE.patch] (got: $1)" ;;
    esac
    shift
  done
}
# The headline rows of the details page: "section / metric: value unit".
ncu_headline() {  # DETAILS_CSV
  python3 -c '
import csv, sys
wanted = ("Duration", "Grid Size", "Registers Per Thread", "Achieved Occupancy", "Executed Ipc Active",
          "Issue Slots Busy", "SM Busy", "Memory Throughput", "L2 Hit Rate", "Mem Busy", "Max Bandwidth",
          "Warp Cycles Per Issued Instruction", "Executed Instructions", "Local Memory Spilling Requests")
for row in csv.DictReader(open(sys.argv[1])):
    if row.get("Metric Name") in wanted:
        print(" ".join((row["Section Name"], "/", row["Metric Name"] + ":", row["Metric Value"], row["Metric Unit"])))
' "$1"
}
task_run() {
  if ! ((dry_run)) && ! command -v ncu >/dev/null; then
    say "no ncu on this machine"
    return 1
  fi
  local tree name status=0 rep
  for tree in . ${candidate:+"$candidate"}; do
    name=main
    [[ $tree == . ]] || name=$(basename "$tree")
    name=${name#.}  # .wt-NAME: no hidden files among the outputs
    rep=$work/ncu_$name
    x --timeout 300 --to "$work/ncu_${name}_run.txt" ncu --set full --import-source no \
      -k "regex:$ncu_kernel" --launch-skip "$ncu_skip" --launch-count 1 -f -o "$rep" \
      "$(bin_of "$tree")"/zt_bench "${ncu_bench[@]}" --reps 1
    if ! ((dry_run)) && [[ ! -f $rep.ncu-rep ]]; then
      say "$name: ncu wrote no report: $(grep -v '^\s*$' "$work/ncu_${name}_run.txt.err" | tail -2 | tr '\n' ' ')"
      status=1
      continue
    fi
    x --to "$work/ncu_${name}_details.csv" ncu --import "$rep.ncu-rep" --page details --csv
    x --to "$work/ncu_${name}_source.csv" ncu --import "$rep.ncu-rep" --page source --csv --print-source sass
    x --to "$work/ncu_${name}_raw.csv" ncu --import "$rep.ncu-rep" --page raw --csv
    ((dry_run)) && continue
    ncu_headline "$work/ncu_${name}_details.csv" | while read -r line; do say "$name: $line"; done
    python3 scripts/ncu_source_summary.py "$work/ncu_${name}_source.csv" >"$work/ncu_${name}_opcodes.txt" 2>&1
    while read -r line; do say "$name: $line"; done <"$work/ncu_${name}_opcodes.txt"
    python3 scripts/ncu_source_summary.py --by-barrier "$work/ncu_${name}_source.csv" >"$work/ncu_${name}_phases.txt" 2>&1
    while read -r line; do say "$name: $line"; done <"$work/ncu_${name}_phases.txt"
    gzip -f "$work/ncu_${name}_source.csv" "$work/ncu_${name}_raw.csv"
  done
  return "$status"
}
