#!/usr/bin/env bash
# Session 21's compare_cpu.sh before/after, interleaved: before = 75ca324 (the base of the reviewed
# diff, ea1aa8c^; /tmp/before20-venv, a clean-clone install), after = 6a9fae5 (/tmp/ci21e-venv,
# the final CI's clean-clone install). Order: before, after, after2, before2.
exec "$(dirname "$0")/../../../compare_cpu_ab.sh" /tmp/before20-venv /tmp/ci21e-venv "$(dirname "$0")"
