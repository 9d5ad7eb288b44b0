#!/usr/bin/env bash
# Session 22's compare_cpu.sh before/after, interleaved, on the session's 2-vCPU AMD EPYC machine:
# before = 7f09528 (the base of the reviewed diff; /tmp/before22-venv, a clean-clone install),
# after = e8e1949 (/tmp/ci22g-venv, the final CI's clean-clone install). Order: before, after,
# after2, before2.
exec "$(dirname "$0")/../../../compare_cpu_ab.sh" /tmp/before22-venv /tmp/ci22g-venv "$(dirname "$0")"
