"""Build the optional C accelerators; everything else is declared in pyproject.toml.

The accelerators are optional: without a C compiler the install still succeeds and
caveman-batch runs its pure-Python reference path (same output, slower). The
accelerators never decide anything alone: when unsure they hand the input back to
the Python path (see caveman_batch/_accel.py).
"""

from setuptools import Extension, setup

_FLAGS = ["-O2", "-std=c11"]

setup(
    ext_modules=[
        Extension("caveman_batch._fastwalk", ["caveman_batch/_fastwalk.c"],
                  extra_compile_args=_FLAGS, optional=True),
        Extension("caveman_batch._fastreduce", ["caveman_batch/_fastreduce.c"],
                  extra_compile_args=_FLAGS, optional=True),
        Extension("caveman_batch._fastcount", ["caveman_batch/_fastcount.c"],
                  extra_compile_args=_FLAGS, optional=True),
        Extension("caveman_batch._fastscan", ["caveman_batch/_fastscan.c"],
                  extra_compile_args=_FLAGS, optional=True),
        Extension("caveman_batch._fastmean", ["caveman_batch/_fastmean.c"],
                  extra_compile_args=_FLAGS, optional=True),
    ],
)
