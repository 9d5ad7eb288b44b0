#!/usr/bin/env bash
# TCP link use between emulated hosts (issue 14's benchmark): all_gather and all_reduce between
# HOSTS hosts of one rank each, every host link shaped to RATE (tc tbf), forestcc against Open
# MPI's tcp transport and gloo in the same run (forestcc-perf --compare, under mpirun with the
# cluster's rsh agent). busbw / shaped rate is the link use.
# usage: perf/tcp_link.sh RATE [HOSTS] [extra forestcc-perf flags]   e.g. perf/tcp_link.sh 1gbit
set -euo pipefail
rate=${1:?rate, e.g. 1gbit}; hosts=${2:-2}; shift $(( $# >= 2 ? 2 : 1 ))
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
id=$(forestcc-cluster up --hosts "$hosts" --rate "$rate")
trap 'forestcc-cluster down "$id" >/dev/null' EXIT
hostlist=$(seq -s, -f "h%g:1" 0 $((hosts - 1)))
for coll in all_gather all_reduce; do
  echo "## $coll, $hosts hosts x 1 rank, links shaped to $rate"
  FORESTCC_CLUSTER=$id mpirun --host "$hostlist" --mca plm_rsh_agent "$(command -v python) -m forestcc.cluster rsh-agent" \
    --mca btl tcp,self --mca btl_tcp_if_include eth0 \
    -x FORESTCC_ROOT_ADDR=h0:29500 -x GLOO_SOCKET_IFNAME=eth0 \
    -x PATH \
    forestcc-perf "$coll" -b 1M -e 64M -f 4 -n 5 -w 2 --compare mpi,gloo "$@"
done
