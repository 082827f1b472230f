#!/usr/bin/env bash
# The main job's progress loop, sourced by local-campaign.sh (and by its test):
#   follow_campaign SERVER ADMIN_TOKEN CAMPAIGN WORKER_PID WORKER_LOG
# Prints the campaign's progress on one line until it is complete (status 0). Fails (status 1,
# with the worker's log) only when the worker had exited before a progress read that still
# shows the campaign incomplete. POLL_SECONDS (1) sets the pace.

progress_line() {
  curl -sf -H "Authorization: Bearer $2" "$1/api/v1/campaigns/$3/progress" \
    | python3 -c 'import json,sys
p=json.load(sys.stdin)
eta=p.get("eta_seconds")
print("%d/%d units, %.1f%% done, %d HR-cases, eta %s%s" % (p["done"]["units"], p["total"]["units"],
  p["percent_done"], p["hr_cases"], "-" if eta is None else "%.0f s" % eta, " COMPLETE" if p["complete"] else ""))' \
    || echo "waiting for the coordinator"
}

follow_campaign() {
  local server=$1 token=$2 campaign=$3 worker=$4 log=$5 exited line
  while :; do
    # Whether the worker is gone is noted *before* reading the progress: it exits only after
    # its last result was accepted, so a read begun after its exit sees every result. Noting
    # it after the read fails a campaign whose last result landed between the two.
    exited=0
    kill -0 "$worker" 2>/dev/null || exited=1
    line=$(progress_line "$server" "$token" "$campaign")
    printf '\r%s   ' "$line" >&2
    case "$line" in *COMPLETE*) echo >&2; return 0 ;; esac
    if [ "$exited" = 1 ]; then
      echo >&2
      printf '\033[1m== %s\033[0m\n' "the worker stopped before the campaign was complete; its log:" >&2
      tail -n 20 "$log" >&2
      return 1
    fi
    sleep "${POLL_SECONDS:-1}"
  done
}
