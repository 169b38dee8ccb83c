#!/usr/bin/env bash
# Runs a command while nvidia-smi samples the GPU's SM clock, power draw and throttle reasons
# every 100 ms into a CSV; then prints a summary of the samples taken under load.
#   usage: host/scripts/gpu/power_trace.sh OUT.csv COMMAND [ARGS...]
# e.g.     HEADS=33 host/scripts/gpu/power_trace.sh /tmp/p.csv .gpu/attention8-bench
# clocks_event_reasons.active 0x4 is the software power cap (the board's power limit).
set -uo pipefail
out=$1
shift
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,power.limit,temperature.gpu,clocks_event_reasons.active \
  --format=csv,noheader,nounits -i "${GPU_INDEX:-0}" -lms 100 >"$out" &
smi=$!
"$@"
rc=$?
kill "$smi" 2>/dev/null
wait "$smi" 2>/dev/null
awk -F', ' '$3 > 300 { n++; mhz += $2; w += $3; if ($6 ~ /4$/) capped++ }
  END { if (n) printf "power_trace: %d samples over 300 W: mean %.0f MHz, %.0f W, %d%% power-capped\n", n, mhz / n, w / n, 100 * capped / n;
        else print "power_trace: no sample over 300 W" }' "$out"
exit "$rc"
