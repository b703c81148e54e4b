# Sourced by the validation scripts: a background load (epbench.harness.load) that dies
# with the script, however it ends.
#   load_start PYTHON KIND SEED   start it (exits 1 if it did not start)
#   load_alive MESSAGE            exit 1 with MESSAGE if a started load has died
#   load_stop                     stop it (also on the script's exit)
load_pid=
load_start() {
  # Its last argument is this script's pid: the load dies with this script, even on SIGKILL.
  "$1" -m epbench.harness.load "$2" "$3" $$ & load_pid=$!
  sleep 1
  kill -0 "$load_pid" 2>/dev/null || { echo "the $2 load did not start" >&2; exit 1; }
}
load_alive() {
  [ -z "$load_pid" ] || kill -0 "$load_pid" 2>/dev/null || { echo "$1" >&2; exit 1; }
}
load_stop() {
  [ -z "$load_pid" ] || { kill "$load_pid" 2>/dev/null; wait "$load_pid" 2>/dev/null; } || true
  load_pid=
}
trap load_stop EXIT
