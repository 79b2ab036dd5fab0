"""Build the Cython kernels. OpenMP is used when the compiler accepts -fopenmp."""
import glob
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup

# build-time settings; every IPUKERN_* variable is listed in ipukern/_settings.py
DEBUG = os.environ.get("IPUKERN_CYTHON_DEBUG") == "1"
NATIVE = os.environ.get("IPUKERN_NATIVE") == "1"


def _openmp_works() -> bool:
    """Compile and link a tiny OpenMP program; fall back to a serial build if that fails."""
    if os.environ.get("IPUKERN_NO_OPENMP") == "1":
        return False
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    cc = cc.split()
    tmp = tempfile.mkdtemp()
    try:
        src = os.path.join(tmp, "omp.c")
        with open(src, "w") as f:
            f.write("#include <omp.h>\nint main(void){return omp_get_max_threads() > 0 ? 0 : 1;}\n")
        res = subprocess.run(cc + ["-fopenmp", src, "-o", os.path.join(tmp, "omp")],
                             capture_output=True)
        return res.returncode == 0
    except OSError:
        return False
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


OPENMP = _openmp_works()
compile_args = ["-O3", "-fno-math-errno", "-std=gnu11"]
link_args = []
if OPENMP:
    compile_args.append("-fopenmp")
    link_args.append("-fopenmp")
if NATIVE:
    compile_args.append("-march=native")
if DEBUG:
    compile_args = ["-O0", "-g"] + compile_args[1:]

print(f"ipukern build: openmp={'on' if OPENMP else 'off'} native={NATIVE} debug={DEBUG}",
      file=sys.stderr)

KERNELS = ["exchange", "vertices", "conv", "fused", "runs", "plan", "im2col"]
extensions = [
    Extension(
        f"ipukern._kernels._{name}",
        [f"ipukern/_kernels/_{name}.pyx"],
        include_dirs=[np.get_include(), "ipukern/_kernels"],
        depends=sorted(glob.glob("ipukern/_kernels/*.h")),   # rebuild when a C header changes
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        extra_compile_args=compile_args,
        extra_link_args=link_args,
        libraries=[] if sys.platform == "win32" else ["m"],   # fmaf in the baseline conv kernel
    )
    for name in KERNELS
]

directives = dict(language_level=3, boundscheck=DEBUG, wraparound=DEBUG,
                  initializedcheck=DEBUG, cdivision=not DEBUG)

setup(ext_modules=cythonize(extensions, compiler_directives=directives))
