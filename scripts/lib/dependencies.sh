# Installs what is missing from the distribution's packages. Sourced by
# scripts/test, scripts/bench, scripts/fuzz and scripts/tsan.
#   require_packages PKG...   needed: install them (root) or print the command and stop
#   optional_packages PKG...  wanted (the libtorch/oneDNN peers, the Python package): install when root, else say what is skipped
#   stage_packages STAGE PKG...  what one stage of scripts/test needs (clang and LLVM's libomp for
#                             the fuzz stage): install when root; returns non-zero, saying the
#                             stage is skipped, when they are missing and cannot be installed

missing_packages() {
  local package
  for package in "$@"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || echo "$package"
  done
}

apt_install() {
  if [ -z "${NORMKIT_APT_UPDATED:-}" ]; then
    apt-get update -qq || return 1
    NORMKIT_APT_UPDATED=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

require_packages() {
  local missing
  missing=$(missing_packages "$@" | tr '\n' ' ')
  [ -z "${missing// /}" ] && return 0
  if [ "$(id -u)" = 0 ]; then
    echo "normkit: installing $missing"
    apt_install $missing || { echo "normkit: apt-get install $missing failed" >&2; exit 1; }
  else
    echo "normkit: missing packages: $missing" >&2
    echo "normkit: install them with: sudo apt-get install -y --no-install-recommends $missing" >&2
    exit 1
  fi
}

optional_packages() {
  local missing
  missing=$(missing_packages "$@" | tr '\n' ' ')
  [ -z "${missing// /}" ] && return 0
  if [ "$(id -u)" = 0 ]; then
    echo "normkit: installing the optional packages $missing"
    apt_install $missing || echo "normkit: could not install $missing; what needs them is skipped" >&2
  else
    echo "normkit: optional packages not installed ($missing); what needs them is skipped." >&2
    echo "normkit: to include them: sudo apt-get install -y --no-install-recommends $missing" >&2
  fi
}

stage_packages() {
  local stage=$1 missing
  shift
  missing=$(missing_packages "$@" | tr '\n' ' ')
  [ -z "${missing// /}" ] && return 0
  if [ "$(id -u)" = 0 ]; then
    echo "normkit: installing $missing for the $stage stage"
    apt_install $missing && return 0
    echo "normkit: could not install $missing; the $stage stage is skipped" >&2
  else
    echo "normkit: the $stage stage needs $missing; it is skipped." >&2
    echo "normkit: to include it: sudo apt-get install -y --no-install-recommends $missing" >&2
  fi
  return 1
}
