# Sourced by the GPU scripts: `stage NAME COMMAND...` runs COMMAND when NAME is in $STAGES, between
# `== NAME` lines that give its seconds and exit status.
stage() {
  local name=$1 t0=$SECONDS rc=0
  shift
  case " $STAGES " in *" $name "*) ;; *) return 0 ;; esac
  echo "== $name"
  "$@" || rc=$?
  echo "== $name: $((SECONDS - t0)) s, exit $rc"
  return "$rc"
}
