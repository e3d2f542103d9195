#!/usr/bin/env bash
# cluster-mixed.sh -- cluster.sh with stock Redis of the same release on
# every other node: a primary and two replicas, so that full syncs, the
# partial resync and both failovers run between stock and redis-afork
# nodes, both ways.
AFORK_CLUSTER_MIX=1 exec bash "$(dirname "$0")/cluster.sh" "$@"
