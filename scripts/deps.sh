#!/bin/sh
# deps.sh - install the Debian packages loaderd builds against, only when some are missing.
# Called by the Makefile before the first compile; safe to run by hand. Exit 0 when all present.
# mate-backgrounds: real photographs for tests/test_decode.c (JPEG_IMG_PHOTO_DIR in tests/jpeg_imgs.h).
# python3-pil, python3-torchvision: tests/it_imagefolder.sh compares dpack with ImageFolder and PIL.
# python3-pil, mate-backgrounds: tests/it_cmyk_idx.sh makes CMYK photographs with PIL.
# libpng-dev, libwebp-dev, libtiff-dev: the png, webp and tiff record kinds (codec/kind_*.c).
# lcov: `make coverage` (scripts/coverage.sh).
# libjson-c-dev: dpack --field NAME=json:KEY (formats/jsonf.c).
# libcurl4-openssl-dev, libexpat1-dev, libssl-dev: the S3 client (s3/: requests and SigV4, the
# store's XML answers, the payload's SHA-256); curl: tests/s3_lib.sh makes moto's IAM user.
# acl, strace, util-linux (setpriv): tests/it_privsep.sh (an ACL that denies a user; loaderd traced
# to show it opens no path a client names; real uids).
# systemd (systemd-analyze), strace: tests/it_install.sh scores the unit's sandbox; tests/it_unpriv.sh
# checks every system call loaderd makes against the unit's SystemCallFilter=.
set -eu

PKGS="build-essential pkg-config liburing-dev libturbojpeg0-dev libjpeg62-turbo-dev libzstd-dev
libxxhash-dev libjson-c-dev libpng-dev libwebp-dev libtiff-dev libcmocka-dev libcurl4-openssl-dev libexpat1-dev libssl-dev curl libopenmpi-dev openmpi-bin libopenblas-dev clang libclang-rt-14-dev
python3 bc iproute2 lcov acl strace util-linux
python3-numpy python3-pytest python3-torch python3-torchvision python3-venv python3-setuptools python3-wheel systemd
python3-prometheus-client python3-pil
mate-backgrounds"

missing=""
for p in $PKGS; do
	st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
	case "$st" in
	*"install ok installed"*) ;;
	*) missing="$missing $p" ;;
	esac
done

[ -z "$missing" ] && exit 0

echo "deps: installing missing Debian packages:$missing" >&2
if [ "$(id -u)" -eq 0 ]; then
	SUDO=""
elif command -v sudo >/dev/null 2>&1; then
	SUDO="sudo"
else
	echo "deps: not root and no sudo; run as root: apt-get install$missing" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing
