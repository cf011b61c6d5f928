#!/usr/bin/env bash
# Libraries the GPU machine lacks, gathered here for the device tool to carry (it copies only the repo):
#   liburing: the static library and its headers (the disk tier's io_uring backend, runtime/direct_io.h;
#     Debian's liburing-dev, installed by scripts/setup.sh);
#   libaio: the static library and libaio.h, for DeepSpeed's async_io op (its NVMe offload), JIT-built on the
#     device by scripts/device/ds_nvme_anchor.sh. Taken from an installed libaio-dev, else from the package itself
#     (`apt-get download`, unpacked here; nothing is installed). The static archive, not libaio.so: the
#     device runs Ubuntu 24.04, where the runtime library was renamed (libaio.so.1t64) and is not certain to
#     be there; libaio.a holds only position-independent syscall wrappers (linkable into the op's .so) and
#     needs nothing from glibc newer than this machine's.
# Writes the git-ignored .device-deps/; pass it to a run with carry [".device-deps"], where
# scripts/device/run.sh points CMake at liburing and scripts/device/ds_nvme_anchor.sh points the op at libaio.
set -euo pipefail
cd "$(dirname "$0")/.."
lib=$(find /usr/lib /usr/lib64 -name liburing.a 2>/dev/null | head -1)
[[ -n "$lib" && -f /usr/include/liburing.h ]] || { echo "liburing-dev is not installed (scripts/setup.sh installs it)" >&2; exit 1; }
rm -rf .device-deps/liburing
mkdir -p .device-deps/liburing/lib .device-deps/liburing/include
cp "$lib" .device-deps/liburing/lib/
cp -r /usr/include/liburing.h /usr/include/liburing .device-deps/liburing/include/
echo "liburing $(dpkg-query -W -f='${Version}' liburing-dev 2>/dev/null || echo '?') -> .device-deps/liburing"

# libaio: an installed libaio-dev, else its package unpacked in a temporary folder.
root=/
version=$(dpkg-query -W -f='${Version}' libaio-dev 2>/dev/null || true)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [[ -z "$version" || ! -f /usr/include/libaio.h ]]; then
  (cd "$tmp" && apt-get download libaio-dev >download.log 2>&1) ||
    { cat "$tmp/download.log" >&2; echo "libaio: 'apt-get download libaio-dev' failed (no package index? run apt-get update)" >&2; exit 1; }
  deb=$(find "$tmp" -maxdepth 1 -name 'libaio-dev_*.deb' | head -1)
  dpkg-deb -x "$deb" "$tmp/root"
  root=$tmp/root
  version="$(dpkg-deb -f "$deb" Version) (downloaded)"
fi
aio_lib=$(find "$root/usr/lib" "$root/usr/lib64" -name libaio.a 2>/dev/null | head -1 || true)
[[ -n "$aio_lib" && -f $root/usr/include/libaio.h ]] || { echo "libaio: no libaio.a or libaio.h in libaio-dev $version" >&2; exit 1; }
rm -rf .device-deps/libaio
mkdir -p .device-deps/libaio/lib .device-deps/libaio/include
cp "$aio_lib" .device-deps/libaio/lib/
cp "$root/usr/include/libaio.h" .device-deps/libaio/include/
# libaio.a keeps the versioned names of libaio.so (io_getevents@@LIBAIO_0.4, .symver): a shared object that
# links them needs a version script that declares those versions ("version node not found" otherwise). The op
# is a shared object: scripts/device/ds_nvme_anchor.py links it with this script; check here that the archive links
# into one that way (position-independent code, the versioned names resolved).
printf 'LIBAIO_0.1 { };\nLIBAIO_0.4 { } LIBAIO_0.1;\n' >.device-deps/libaio/libaio.map
printf '#include <libaio.h>\nint probe(io_context_t c, struct iocb **v, struct io_event *e) {\n  return io_submit(c, 1, v) + io_getevents(c, 1, 1, e, 0) + io_cancel(c, v[0], e); }\n' >"$tmp/probe.c"
if command -v cc >/dev/null; then
  cc -shared -fPIC -I.device-deps/libaio/include "$tmp/probe.c" -L.device-deps/libaio/lib -laio \
    -Wl,--version-script=.device-deps/libaio/libaio.map -o "$tmp/probe.so" ||
    { echo "libaio: $aio_lib does not link into a shared object" >&2; exit 1; }
fi
echo "libaio $version -> .device-deps/libaio"
