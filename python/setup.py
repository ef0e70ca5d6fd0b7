"""setup.py - builds the package's own libldc.so (the C client API of shm/ldc.h) from the C sources,
so that `pip install ./python` and a wheel from `pip wheel ./python` work with no LOADERD_LIB.

Metadata lives in pyproject.toml; this file only adds the build step. The library is declared
as an extension so that setuptools runs build_ext (also for `pip install -e`, in place) and tags
the wheel for the platform, but it is a plain shared object that Python never imports: ctypes
loads it (loaderd/_lib.py). It is compiled with $CC (default cc), like the Makefile's
$(BUILD)/lib/libldc.so: the same six files, -fPIC, a version script that exports ldc_* only.

The verdict's table, trainer/report_limits.def, is copied into the package beside it.

Where the C sources come from: csrc/shm/ and csrc/s3/ inside an sdist (the sdist command below
copies them there), else ../shm/ and ../s3/ of the loaderd checkout this folder sits in.
"""
import os
import shlex
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
# The client library is these files and nothing else (ldc.c -> ctl.c, ctl_augment.c, ring.c,
# token.c, and s3/s3cfg.c, the user's S3 credentials for ldc_s3_offer; libc only): a link with
# --no-undefined below proves it on every build.
C_FILES = ("shm/ring.c", "shm/ctl.c", "shm/ctl_augment.c", "shm/ldc.c", "shm/token.c",
           "s3/s3cfg.c", "shm/ring.h", "shm/ctl.h", "shm/ldc.h", "shm/token.h", "s3/s3cfg.h",
           "trainer/report_limits.def")
# The verdict's one table (trainer/report.c compiles it; loaderd/report.py reads it): shipped
# inside the package, next to libldc.so.
TABLE = "trainer/report_limits.def"
SONAME = "libldc.so.3"  # shm/module.mk's LDC_SOVERSION


def source_root() -> Path:
    """The directory that holds shm/: csrc/ of an sdist, or the checkout above python/."""
    for root in (HERE / "csrc", HERE.parent):
        if all((root / f).is_file() for f in C_FILES):
            return root
    raise RuntimeError(
        f"loaderd: the C client sources ({', '.join(C_FILES)}) are neither in {HERE / 'csrc'} "
        f"(an sdist) nor in {HERE.parent} (a loaderd checkout); build from the repository "
        "(pip install ./python) or from an sdist made by `python3 setup.py sdist`")


class BuildLibldc(build_ext):
    """Compile libldc.so with the C compiler directly (no Python headers, no Python ABI)."""

    def get_ext_filename(self, fullname):
        return os.path.join(*fullname.split(".")) + ".so"  # loaderd/libldc.so, no ABI tag

    def build_extension(self, ext):
        root = source_root()
        out = Path(self.get_ext_fullpath(ext.name))
        tmp = Path(self.build_temp)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp.mkdir(parents=True, exist_ok=True)
        cc = shlex.split(os.environ.get("CC", "cc"))
        cflags = shlex.split(os.environ.get("CFLAGS", "-O2 -g"))
        vers = tmp / "libldc.map"
        vers.write_text("{\n  global: ldc_*;\n  local: *;\n};\n")
        objs = []
        for src in ext.sources:
            obj = tmp / (Path(src).stem + ".o")
            self.spawn(cc + cflags + ["-std=c11", "-D_GNU_SOURCE", "-pthread", "-fPIC",
                                      "-I", str(root), "-c", str(root / src), "-o", str(obj)])
            objs.append(str(obj))
        self.spawn(cc + cflags + ["-shared", "-pthread", f"-Wl,-soname,{SONAME}",
                                  "-Wl,--no-undefined", f"-Wl,--version-script={vers}",
                                  "-o", str(out)] + objs)
        (out.parent / Path(TABLE).name).write_bytes((root / TABLE).read_bytes())


class SdistWithSources(sdist):
    """An sdist that carries the C sources in csrc/ (shm/, s3/), so that it builds away from the
    checkout."""

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        root = source_root()
        for f in C_FILES:
            dst = Path(base_dir) / "csrc" / f
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes((root / f).read_bytes())


setup(
    ext_modules=[Extension("loaderd.libldc", sources=[f for f in C_FILES if f.endswith(".c")])],
    cmdclass={"build_ext": BuildLibldc, "sdist": SdistWithSources},
)
