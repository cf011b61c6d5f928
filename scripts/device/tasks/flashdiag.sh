# shellcheck shell=bash disable=SC2034,SC2154  # sourced by scripts/device/run.sh, which sets the rest
# flashdiag: where the flash attention's backward spends its time at 4 x 2048 and 1 x 8192 (xlarge, bf16,
# dropout 0.1), for issue 39's 1.5x over FlashDeBERTa. scripts/device/patches/flashdiag.patch (diagnostic
# code, never on main: it gives wrong gradients on purpose) is applied to this copy of the tree before the
# build and taken out after the runs; it reads ZT_FLASH_DIAG at L >= 1024 (zt_bench validates at small L
# first) and leaves out: unordered, the wait for each query tile's turn to add into dQ and Gc (racy sums);
# nobuckets, Gc and Gp (nogc, nogp: one of them); nodropout; nopositional, the C2P / P2C terms and their
# buckets. zt_bench --only flash under each (and two together): the time saved is that work's share.
# ~120 s to build zt_bench on a fresh H100, then ~10 s a variant and shape. One call:
#   run(carry=[".device-deps"], timeout_s=360): scripts/device/run.sh flashdiag
targets=(zt_bench)
flashdiag_patch=$device_dir/patches/flashdiag.patch
task_args() {
  (($# == 0)) || refuse "flashdiag takes no arguments (got: $*)"
  ((dry_run)) && return 0
  patch -p1 --dry-run --silent <"$flashdiag_patch" >/dev/null || refuse "flashdiag: $flashdiag_patch does not apply"
  patch -p1 --silent <"$flashdiag_patch"
}
task_run() {
  local shape batch seq variant label
  for shape in 4x2048 1x8192; do
    IFS=x read -r batch seq <<<"$shape"
    for variant in "" unordered nobuckets nogc nogp nodropout nopositional "unordered nobuckets"; do
      label=${variant:-none}
      label=${label// /+}
      ZT_FLASH_DIAG="$variant" x --timeout 90 --to "$work/diag_${shape}_$label.txt" "$bin"/zt_bench --only flash \
        --batch "$batch" --seq "$seq" --reps 5
      ((dry_run)) || say "$shape $label: $(grep -E 'flash' "$work/diag_${shape}_$label.txt" | tr -s ' ' | head -4 | tr '\n' ';')"
    done
  done
  ((dry_run)) || patch -p1 -R --silent <"$flashdiag_patch"
}
