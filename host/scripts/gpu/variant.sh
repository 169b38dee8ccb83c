# shellcheck shell=bash
# A benchmark variant's words ("NAME:WORDS" in bench.sh, world_bench.sh and precision_gate.sh):
# leading VAR=value words go into that run's environment (research switches such as
# FASTVIDEO_ATTN8_RECIPE), the rest are the binary's flags. Sets VARIANT_ENV and VARIANT_FLAGS;
# run as: env ${VARIANT_ENV[@]+"${VARIANT_ENV[@]}"} "$BIN" ... ${VARIANT_FLAGS[@]+"${VARIANT_FLAGS[@]}"}
variant_words() {
  VARIANT_ENV=()
  VARIANT_FLAGS=("$@")
  while [[ ${#VARIANT_FLAGS[@]} -gt 0 && ${VARIANT_FLAGS[0]} =~ ^[A-Z_][A-Z0-9_]*= ]]; do
    VARIANT_ENV+=("${VARIANT_FLAGS[0]}")
    VARIANT_FLAGS=("${VARIANT_FLAGS[@]:1}")
  done
}
