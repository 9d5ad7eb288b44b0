#!/usr/bin/env bash
# Session 23's compare_cpu.sh before/after, interleaved, on the session's 2-vCPU machine:
# before = a6066c9 (the host code of the read-through's base dbc26d5 and of the session's base
# 268b42a; /tmp/ci22h-venv, a clean-clone install), after = the read-through mends' commit
# (/tmp/ci23g-venv, its CI's clean-clone install). Order: before, after, after2, before2.
exec "$(dirname "$0")/../../../compare_cpu_ab.sh" /tmp/ci22h-venv /tmp/ci23g-venv "$(dirname "$0")"
