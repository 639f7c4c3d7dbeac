#!/usr/bin/env bash
# Smoke test of a running local test cluster (after spec/cluster/up.sh), all
# through slurmrestd like the product: partitions, nodes + GRES, a job that
# completes, a GPU job on an a100 node, a job accepted but pending with
# AccountNotAllowed, and a NODE_FAIL produced with node.sh. Takes ~30 s.
# Leaves the cluster up (node n1 is restored).
# shellcheck disable=SC2015  # `check && ok || bad`: ok() cannot fail
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
ROOT_REASON="it uses node.sh"
require_root "$@"

[ -r "$ENV_FILE" ] || die "no $ENV_FILE; run spec/cluster/up.sh first"
# shellcheck disable=SC1090
. "$ENV_FILE"
V="$OBLETH_SLURM_API_VERSION"
fails=0
ok() { printf 'ok   %s\n' "$*"; }
bad() { printf 'FAIL %s\n' "$*"; fails=$((fails + 1)); }

api() { # method path [body]
  local args=(-sS --max-time 10 -X "$1" -H "X-SLURM-USER-NAME: $OBLETH_SLURM_USER"
    -H "X-SLURM-USER-TOKEN: $OBLETH_SLURM_TOKEN")
  [ "$#" -lt 3 ] || args+=(-H 'Content-Type: application/json' --data "$3")
  curl "${args[@]}" "$OBLETH_SLURM_URL$2"
}
flat() { tr -d ' \n'; } # compact JSON so grep can match "key":value
submit() { # json-job-properties script -> job id on stdout
  local out id
  out="$(api POST "/slurm/$V/job/submit" "{\"script\":\"#!/bin/bash\\n$2\",\"job\":{$1,\"current_working_directory\":\"/tmp\",\"environment\":{\"PATH\":\"/usr/bin:/bin\"}}}" | flat)"
  id="$(sed -n 's/.*"job_id":\([0-9]*\).*/\1/p' <<<"$out")"
  [ -n "$id" ] || { echo "submit refused: $out" >&2; return 1; }
  echo "$id"
}
acct_state() { sacct -n -X -P -j "$1" -o State 2>/dev/null | head -n1; }
wait_acct_state() { # id state limit
  local i
  for ((i = 0; i < $3; i++)); do
    [ "$(acct_state "$1")" = "$2" ] && return 0
    sleep 1
  done
  return 1
}

p="$(api GET "/slurm/$V/partitions" | flat)"
grep -q '"name":"gpu"' <<<"$p" && grep -q '"name":"debug"' <<<"$p" && ok "partitions gpu, debug" || bad "partitions: $p"

n="$(api GET "/slurm/$V/nodes" | flat)"
for want in '"gres":"gpu:a100:4"' '"gres":"gpu:h100:8"' '"name":"n0"' '"name":"n3"'; do
  grep -q "$want" <<<"$n" || bad "nodes lack $want"
done
ok "nodes n0-n3 with GRES"

j="$(submit '"name":"smoke-t","partition":"gpu","account":"research","time_limit":5' 'sleep 5\nhostname')"
wait_acct_state "$j" COMPLETED 40 && ok "job $j COMPLETED" || bad "job $j is $(acct_state "$j")"
db="$(api GET "/slurmdb/$V/job/$j" | flat)"
grep -q '"current":"COMPLETED"' <<<"$db" && ok "slurmdb job $j COMPLETED" || bad "slurmdb job $j: ${db:0:300}"

g="$(submit '"name":"smoke-gpu","partition":"gpu","account":"research","time_limit":5,"gpus_per_node":"a100:2"' 'sleep 2')"
wait_acct_state "$g" COMPLETED 40 || bad "gpu job $g is $(acct_state "$g")"
gn="$(sacct -n -X -P -j "$g" -o NodeList | head -n1)"
case "$gn" in n0 | n1 | n2) ok "a100:2 job $g ran on $gn" ;; *) bad "a100:2 job $g ran on '$gn'" ;; esac

t="$(submit '"name":"smoke-teach","partition":"debug","account":"teaching","time_limit":5' 'sleep 2')"
# The reason is set when the scheduler first looks at the job (a few seconds).
for ((i = 0; i < 30; i++)); do
  r="$(api GET "/slurm/$V/job/$t" | flat)"
  grep -q '"state_reason":"AccountNotAllowed"' <<<"$r" && break
  sleep 1
done
grep -q '"state_reason":"AccountNotAllowed"' <<<"$r" && grep -q 'PENDING' <<<"$r" && ok "teaching on debug accepted, pending AccountNotAllowed" || bad "job $t: ${r:0:300}"
scancel "$t" || true

f="$(submit '"name":"smoke-nf","partition":"gpu","account":"research","time_limit":5,"nodelist":"n1"' 'sleep 300')"
for ((i = 0; i < 20; i++)); do [ "$(squeue -h -j "$f" -o %T)" = RUNNING ] && break; sleep 1; done
"$CLUSTER_SPEC_DIR/node.sh" stop n1 "smoke: simulated failure"
wait_acct_state "$f" NODE_FAIL 20 && ok "job $f NODE_FAIL after node.sh stop n1" || bad "job $f is $(acct_state "$f")"
"$CLUSTER_SPEC_DIR/node.sh" start n1
[ "$(node_state n1)" = idle ] && ok "n1 idle again" || bad "n1 is $(node_state n1)"

[ "$fails" -eq 0 ] || die "$fails smoke check(s) failed"
echo "cluster smoke test passed"
