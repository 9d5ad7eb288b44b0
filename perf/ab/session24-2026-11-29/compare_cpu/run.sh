#!/usr/bin/env bash
# Session 24's compare_cpu.sh before/after, interleaved, on the session's 2-vCPU machine:
# before = 5c938f5 (the host code of the session's base 82e80e5; /tmp/ci23g-venv, a clean-clone
# install), after = 5e02067 (this session's refusals and audit mends; /tmp/ci24d-venv, its CI's
# clean-clone install). compare_cpu.sh now runs sendrecv too. Order: before, after, after2, before2.
exec "$(dirname "$0")/../../../compare_cpu_ab.sh" /tmp/ci23g-venv /tmp/ci24d-venv "$(dirname "$0")"
