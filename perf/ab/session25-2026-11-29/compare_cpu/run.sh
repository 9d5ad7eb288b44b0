#!/usr/bin/env bash
# Session 25's compare_cpu.sh before/after, interleaved, on the session's 2-vCPU machine:
# before = 7a4d2df (the session's base; /tmp/ci24g-venv, a clean-clone install), after = e0b4f69
# (same-node faults, buffer holds, the audits' mends; /tmp/ci25f-venv, its CI's clean-clone
# install). Order: before, after, after2, before2.
exec "$(dirname "$0")/../../../compare_cpu_ab.sh" /tmp/ci24g-venv /tmp/ci25f-venv "$(dirname "$0")"
