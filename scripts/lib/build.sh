# Building, for every script that builds (source it; bash; from the
# repository's root). The presets are CMakePresets.json's.

# braid_build <preset> [target ...]: configures the preset's tree (quietly)
# and builds the targets, or everything.
braid_build() {
  local preset="$1"
  shift
  cmake --preset "$preset" >/dev/null
  if [[ $# -gt 0 ]]; then
    cmake --build --preset "$preset" --target "$@"
  else
    cmake --build --preset "$preset"
  fi
}

# braid_need <who> <file ...>: exits 1 with how to build them unless every
# file exists and is executable (programs and shared libraries a build made).
braid_need() {
  local who="$1" f
  shift
  for f in "$@"; do
    if [[ ! -x "$f" ]]; then
      echo "$who: $f not built (cmake --preset release && cmake --build --preset release)" >&2
      exit 1
    fi
  done
}
