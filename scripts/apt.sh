# apt.sh is sourced by the scripts that install Debian packages they need (image.sh, tools.sh).
# apt_install PKG...: installs the missing ones (an apt-get update only when the first try fails).
apt_install() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "apt-get install ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
    apt-get update -q >/dev/null 2>&1 || true
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
  fi
}
