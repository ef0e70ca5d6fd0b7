#!/bin/sh
# gpu-bundle.sh - build here with CUDA and pack everything the GPU machine of issue 7 needs to run
# loaderd, the trainer, the tools and the GPU tests, since nothing can be installed there (no
# package registry; no liburing, libjpeg-turbo, zstd, xxhash, OpenBLAS or Open MPI either).
#
#   sh scripts/gpu-bundle.sh            make, then build/gpu-bundle/ and build/gpu-bundle.tar.gz
#   sh scripts/gpu-bundle.sh --check D  only the library check of an existing bundle D
#
# On the GPU machine: tar xzf gpu-bundle.tar.gz && gpu-bundle/gpu-run.sh (docs/PERFORMANCE.md
# has the commands, including how the device tool carries the tarball).
#
# The bundle:
#   gpu-run.sh, env.sh       the runner (scripts/gpu-run.sh) and what it sources: LD_LIBRARY_PATH,
#                            Open MPI relocated into the bundle
#   build/bin/*              every program `make` built (loaderd, trainer, ldbench, ldcat, loaderctl,
#                            dsgen, dpack, ...)
#   build/tests/gpu_*        the GPU tests, with tests/run.sh and tests/gpu_*.sh (`make test-gpu`)
#   lib/                     every shared library those load that is neither glibc, the GCC runtime
#                            nor CUDA: liburing, libturbojpeg, libjpeg, libzstd, libxxhash,
#                            libopenblas (+ libgfortran, libquadmath), libmpi and Open MPI's own
#                            (libopen-pal, libopen-rte, libhwloc, libevent, libmca_common_*), ...
#   lib/cuda/                libcudart of the nvcc that built the kernels, as a last resort only
#   openmpi/                 the Open MPI components a singleton opens, and Open MPI's help texts
#   MANIFEST                 what was built from what, the glibc it needs, and the library check
#
# Decisions (issue 7, device/HOPPER.md, device/KINDS.md):
#   - CUDA libraries are the GPU machine's. libcuda comes with its driver (580, CUDA 13.0). cuBLAS
#     (libcublas + libcublasLt, ~600 MB) and NCCL (~210 MB) are far over what a call of the device
#     tool carries (64 MiB) and are there already as PyTorch's pip packages (nvidia-cublas,
#     nvidia-nccl-cu13, nvidia-cuda-runtime: site-packages/nvidia/cu13/lib, nvidia/nccl/lib);
#     env.sh puts those first. The bundled cudart (0.7 MB) only fills in if none is found; a
#     CUDA 13.x runtime runs on the 13.0 driver (minor-version compatibility).
#   - Kernels are sm_90 machine code (trainer/module.mk builds with -arch=sm_90, as HOPPER.md asks
#     for H100/H200): nothing is JIT-compiled at start. The build is checked for it (the fatbin of
#     build/bin/trainer must hold sm_90 ELF), in a build directory of the bundle's own.
#   - No mpirun: that machine has one GPU, so one trainer rank, and every MPI program runs as a
#     singleton (MPI_Init without mpirun) with ess_singleton_isolated, which starts no orted. So
#     mpirun, orted, PMIx and the network components are left out (a multi-rank run would need
#     them). The components bundled are the ones a singleton trainer and gpu_nccl/gpu_mlp open
#     here under env.sh's settings (probed with LD_DEBUG=files below).
#   - glibc and the GCC runtime (libstdc++, libgcc_s) are the target's own: the image there is
#     newer (Python 3.12.3), and a glibc from here would not load there; MANIFEST states the
#     newest GLIBC_ symbol version the bundle needs.
set -eu
cd "$(dirname "$0")/.."

die() { echo "gpu-bundle: $*" >&2; exit 1; }

# Names of libraries that stay the target's own: glibc and the GCC runtime.
is_system() {
	case $1 in
	linux-vdso.so.*|ld-linux-x86-64.so.*|libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|\
	librt.so.*|libresolv.so.*|libutil.so.*|libstdc++.so.*|libgcc_s.so.*) return 0 ;;
	esac
	return 1
}
# CUDA libraries found on the GPU machine (driver; PyTorch's pip packages).
is_cuda() {
	case $1 in
	libcuda.so.*|libcudart.so.*|libcublas.so.*|libcublasLt.so.*|libnccl.so.*|libnvidia-*) return 0 ;;
	esac
	return 1
}
is_elf() { [ -f "$1" ] && [ "$(head -c 4 "$1" | od -An -c | tr -d ' ')" = '177ELF' ]; }

# check DIR: ldd every ELF file of the bundle with LD_LIBRARY_PATH = the bundle's libraries only.
# Every dependency must resolve inside the bundle, or be glibc / the GCC runtime, or be a CUDA
# library (resolved here from the CUDA toolkit through the binaries' RUNPATH; on the GPU machine
# from the driver and PyTorch's packages). "not found" is allowed for libcuda.so.1 alone (the
# driver's). Prints one line per library and where it came from; returns 1 on any other case.
check() {
	b=$(cd "$1" && pwd)
	bad=0
	tmp=$(mktemp)
	find "$b" -type f | sort | while read -r f; do
		is_elf "$f" || continue
		LD_LIBRARY_PATH="$b/lib:$b/lib/cuda" ldd "$f" 2>&1 | while read -r name arrow path rest; do
			case $name in
			linux-vdso.so.*|/*ld-linux*) continue ;;
			esac
			[ "$arrow" = "=>" ] || { echo "$name ? ${f#"$b"/}"; continue; }
			if [ "$path" = "not" ]; then
				echo "$name notfound ${f#"$b"/}"
			else
				echo "$name $path ${f#"$b"/}"
			fi
		done
	done >"$tmp"
	echo "library check: ldd on every ELF file in ${1}, LD_LIBRARY_PATH=<bundle>/lib:<bundle>/lib/cuda"
	for name in $(cut -d' ' -f1 "$tmp" | sort -u); do
		where=$(grep "^$name " "$tmp" | cut -d' ' -f2 | sort -u | head -n 1)
		users=$(grep -c "^$name " "$tmp")
		case $where in
		"$b"/*) what="bundle  ${where#"$b"/}" ;;
		notfound)
			if [ "$name" = libcuda.so.1 ]; then what="not found here: the GPU driver's (allowed)"
			else what="NOT FOUND"; bad=1; fi ;;
		*)
			if is_system "$name"; then what="system  $where (glibc / GCC runtime: the target's own)"
			elif is_cuda "$name"; then what="cuda    $where here; on the GPU machine: env.sh's CUDA dirs"
			else what="OUTSIDE THE BUNDLE: $where"; bad=1; fi ;;
		esac
		printf '  %-32s %3d users  %s\n' "$name" "$users" "$what"
	done
	rm -f "$tmp"
	if [ $bad -ne 0 ]; then
		echo "library check: FAILED"
		return 1
	fi
	echo "library check: ok (everything but glibc, the GCC runtime and CUDA comes from the bundle)"
}

if [ "${1:-}" = --check ]; then
	[ -d "${2:-}" ] || die "--check needs the bundle directory"
	check "$2"
	exit $?
fi
[ $# -eq 0 ] || die "usage: gpu-bundle.sh [--check DIR]"

# ---- build ----
command -v nvcc >/dev/null 2>&1 || [ -n "${CUDA_HOME:-}" ] ||
	die "no nvcc on PATH and no CUDA_HOME: the bundle is for the GPU machine and needs a CUDA build"
# A build directory of its own: make does not rebuild objects when only flags change, and objects
# left from an older flag set (say, before -arch=sm_90) would carry the wrong machine code.
O=${GPU_BUNDLE_BUILD:-build/gpu-build}
make -j"$(nproc)" BUILD="$O" all
ldd "$O/bin/trainer" | grep -q 'libcudart' ||
	die "$O/bin/trainer is not linked with CUDA (built without nvcc?): remove $O and retry"
# fatbin_archs FILE: the GPU images in FILE's .nv_fatbin section, as "elf:90 ptx:90" (cuobjdump
# is not always installed; the fatbin header layout is stable: magic 0xBA55ED50, then entries of
# kind 1 PTX / 2 ELF with the SM number at offset 28).
fatbin_archs() {
	t=$(mktemp)
	objcopy -O binary --only-section=.nv_fatbin "$1" "$t" 2>/dev/null
	python3 - "$t" <<'PY'
import struct, sys
b = open(sys.argv[1], 'rb').read()
off, out = 0, set()
while off + 16 <= len(b):
    magic, ver, hsz, fsz = struct.unpack_from('<IHHQ', b, off)
    if magic != 0xBA55ED50:
        off += 8
        continue
    p, end = off + hsz, off + hsz + fsz
    while p + 32 <= end:
        kind, _, ehsz, size = struct.unpack_from('<HHIQ', b, p)
        out.add('%s:%d' % ({1: 'ptx', 2: 'elf'}.get(kind, str(kind)), struct.unpack_from('<I', b, p + 28)[0]))
        p += ehsz + size
    off = end
print(' '.join(sorted(out)))
PY
	rm -f "$t"
}
archs=$(fatbin_archs "$O/bin/trainer")
case " $archs " in
*" elf:90 "*) ;;
*) die "$O/bin/trainer holds GPU code for '$archs', not sm_90 machine code (elf:90): objects from other flags? remove $O and retry" ;;
esac

B=build/gpu-bundle
rm -rf "$B" build/gpu-bundle.tar.gz
mkdir -p "$B/build/bin" "$B/build/tests" "$B/tests" "$B/lib/cuda" "$B/openmpi/lib/openmpi3" \
	"$B/openmpi/share/openmpi" "$B/openmpi/etc" "$B/openmpi/hwloc-plugins"
for f in "$O"/bin/*; do
	[ -f "$f" ] && cp -p "$f" "$B/build/bin/"
done
cp -p "$O"/tests/gpu_* "$B/build/tests/"
cp -p tests/run.sh tests/lib.sh "$B/tests/"
cp -p tests/gpu_*.sh "$B/tests/" 2>/dev/null || true
cp -p scripts/gpu-run.sh "$B/gpu-run.sh"

# ---- Open MPI: the components a singleton opens under env.sh's settings ----
# These must match env.sh below.
OMPI_ENV="OMPI_MCA_ess_singleton_isolated=1 OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader"
probe=$(mktemp)
# shellcheck disable=SC2086
{
	env $OMPI_ENV LD_DEBUG=files "$O/bin/trainer" --synthetic --device host --steps 2 --crop 16 \
		--batch 4 --log-every 0 >/dev/null
	env $OMPI_ENV LD_DEBUG=files "$O/tests/gpu_nccl" --self-check >/dev/null
	env $OMPI_ENV LD_DEBUG=files "$O/tests/gpu_mlp" --self-check >/dev/null
} 2>"$probe" || die "probing Open MPI's components failed (a singleton run here): see $probe"
plugins=$(grep -o 'file=[^ ]*/mca_[a-z0-9_]*\.so' "$probe" | sed 's/^file=//' | sort -u)
rm -f "$probe"
[ -n "$plugins" ] || die "no Open MPI component was opened by the probe runs"
for p in $plugins; do
	cp -pL "$p" "$B/openmpi/lib/openmpi3/"
done
ompi_data=$(ompi_info --path pkgdatadir --parsable 2>/dev/null | sed -n 's/^path:pkgdatadir://p')
[ -d "${ompi_data:-/usr/share/openmpi}" ] && cp -p "${ompi_data:-/usr/share/openmpi}"/help-*.txt \
	"$B/openmpi/share/openmpi/" 2>/dev/null || true
ompi_etc=$(ompi_info --path sysconfdir --parsable 2>/dev/null | sed -n 's/^path:sysconfdir://p')
[ -f "${ompi_etc:-/etc/openmpi}/openmpi-mca-params.conf" ] &&
	cp -p "${ompi_etc:-/etc/openmpi}/openmpi-mca-params.conf" "$B/openmpi/etc/" || true

# ---- shared libraries: the closure ldd reports for every ELF file in the bundle ----
find "$B" -type f | sort | while read -r f; do
	is_elf "$f" || continue
	ldd "$f" | awk '$2 == "=>" { print $1, $3 }'
done | sort -u | while read -r name path; do
	if [ "$path" = "not" ]; then
		is_cuda "$name" || die "$name: not found here (needed by the bundle)"
		continue
	fi
	is_system "$name" && continue
	case $name in
	libcudart.so.*) cp -pL "$path" "$B/lib/cuda/$name" ;;
	libcuda.so.*|libcublas.so.*|libcublasLt.so.*|libnccl.so.*|libnvidia-*) ;;  # the machine's
	*) cp -pL "$path" "$B/lib/$name" ;;
	esac
done

# ---- env.sh ----
cat >"$B/env.sh" <<'EOF'
# env.sh - the bundle's environment. Source it from the bundle's top directory (cd gpu-bundle &&
# . ./env.sh) or with GPU_BUNDLE set to it. Made by scripts/gpu-bundle.sh.
#   LD_LIBRARY_PATH: the bundle's libraries; then the CUDA libraries of this machine (CUDA_LIB_DIRS
#     if set, PyTorch's nvidia/*/lib package folders that hold cuBLAS, NCCL or cudart, the driver's
#     /usr/local/nvidia/lib64, /usr/local/cuda/lib64); then what was set before; then the bundled
#     cudart, a fallback only.
#   Open MPI relocated into the bundle; MPI programs run as singletons (no mpirun, no orted).
GPU_BUNDLE=${GPU_BUNDLE:-$PWD}
if [ ! -f "$GPU_BUNDLE/env.sh" ] || [ ! -d "$GPU_BUNDLE/lib" ]; then
	echo "env.sh: $GPU_BUNDLE is not the bundle: cd into it first, or set GPU_BUNDLE" >&2
	return 1 2>/dev/null || exit 1
fi
export GPU_BUNDLE
gpu_cuda_dirs=${CUDA_LIB_DIRS:-}
for d in $(python3 -c '
import os
try:
    import nvidia
except Exception:
    raise SystemExit
for p in nvidia.__path__:
    for s in sorted(os.listdir(p)):
        d = os.path.join(p, s, "lib")
        if os.path.isdir(d) and any(f.startswith(("libcublas", "libnccl", "libcudart"))
                                   for f in os.listdir(d)):
            print(d)
' 2>/dev/null) /usr/local/nvidia/lib64 /usr/local/cuda/lib64; do
	[ -d "$d" ] && gpu_cuda_dirs=${gpu_cuda_dirs:+$gpu_cuda_dirs:}$d
done
export LD_LIBRARY_PATH="$GPU_BUNDLE/lib${gpu_cuda_dirs:+:$gpu_cuda_dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}:$GPU_BUNDLE/lib/cuda"
unset gpu_cuda_dirs d
# Open MPI: components, help texts and settings from the bundle (Debian's paths do not exist
# there); a singleton that starts no orted; shared memory and self only (one rank).
export OPAL_PREFIX="$GPU_BUNDLE/openmpi" OPAL_EXEC_PREFIX="$GPU_BUNDLE/openmpi"
export OPAL_LIBDIR="$GPU_BUNDLE/lib" OPAL_PKGLIBDIR="$GPU_BUNDLE/openmpi/lib/openmpi3"
export OPAL_DATADIR="$GPU_BUNDLE/openmpi/share" OPAL_PKGDATADIR="$GPU_BUNDLE/openmpi/share/openmpi"
export OPAL_SYSCONFDIR="$GPU_BUNDLE/openmpi/etc"
export OMPI_MCA_mca_base_component_path="$GPU_BUNDLE/openmpi/lib/openmpi3"
export OMPI_MCA_ess_singleton_isolated=1 OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# hwloc's plugins (PCI, OpenCL, GL) are optional; an empty folder keeps a foreign version's out.
export HWLOC_PLUGINS_PATH="$GPU_BUNDLE/openmpi/hwloc-plugins"
EOF
for kv in $OMPI_ENV; do
	grep -q "$kv" "$B/env.sh" || die "env.sh does not set $kv like the probe did"
done

# ---- MANIFEST and the check ----
glibc=$(find "$B" -type f | while read -r f; do
	is_elf "$f" && objdump -T "$f" 2>/dev/null | grep -o 'GLIBC_[0-9.]*'
done | sort -u -V | tail -n 1)
{
	echo "gpu-bundle of loaderd $(git describe --always --dirty 2>/dev/null || echo '?'), made $(date -u '+%Y-%m-%d %H:%M UTC') on $(uname -m) $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
	echo "nvcc: $(nvcc --version 2>/dev/null | tail -n 1)"
	echo "GPU code in build/bin/trainer (fatbin): $archs (elf = machine code, ptx = JIT-able)"
	echo "needs glibc >= ${glibc#GLIBC_} on the target (newest GLIBC_ symbol version used)"
	echo "CUDA libraries expected on the target: libcuda.so.1 (driver), libcublas.so.13, libcublasLt.so.13, libnccl.so.2 (PyTorch's nvidia-* packages); libcudart.so.13 there or lib/cuda/ here"
	echo
	echo "files:"
	(cd "$B" && find . -type f | sort | while read -r f; do
		printf '  %10d  %s\n' "$(stat -c %s "$f")" "${f#./}"
	done)
	echo
	check "$B"
} >"$B/MANIFEST" || { cat "$B/MANIFEST"; die "the library check failed"; }
tar -C build -czf build/gpu-bundle.tar.gz gpu-bundle
sed -n '1,5p' "$B/MANIFEST"
sed -n '/^library check/,$p' "$B/MANIFEST"
echo "gpu-bundle: $B ($(du -sh "$B" | cut -f1)), build/gpu-bundle.tar.gz ($(du -h build/gpu-bundle.tar.gz | cut -f1))"
