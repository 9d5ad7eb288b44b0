#!/usr/bin/env bash
# Session 25's read-through comparison over the whole reviewed change: before = 090dc68 (the
# read-through's base, in session 24; /tmp/b090-venv, a clean-clone install), after = 6e2ee30
# (this session's final code; /tmp/ci25i-venv, its CI's clean-clone install). Order: before,
# after, after2, before2.
exec "$(dirname "$0")/../../../compare_cpu_ab.sh" /tmp/b090-venv /tmp/ci25i-venv "$(dirname "$0")"
