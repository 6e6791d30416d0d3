#!/bin/sh
# Install the appliance from this checkout as a system service (Debian 12; run as root):
#
#   user and group  appliance (system, no login shell, home /var/lib/appliance)
#   program         /opt/appliance/venv (python3 -m venv, this checkout pip-installed into it)
#   configuration   /etc/appliance/appliance.toml (from deploy/appliance.toml, only if there is none yet)
#   state           /var/lib/appliance (appliance:appliance 0750)
#   devices         /etc/udev/rules.d/60-appliance.rules (group appliance may use /dev/pps*, /dev/ptp*,
#                   /dev/gpiochip*, and write /dev/cpu_dma_latency)
#   unit            /etc/systemd/system/appliance.service (from deploy/appliance.service), then daemon-reload
#
# It never starts, stops or enables a service and never overwrites the configuration; running it again upgrades
# the program in place.  README.md ("Installing it as a service") has the whole procedure.
#
#   deploy/install.sh [--dry-run]
#
# --dry-run   print every step, change nothing (no root needed)
# DESTDIR=DIR install the files under DIR instead of / (an image being built, a test): the user, file owners,
#             udev and systemd reloads are then left to whoever boots that tree (listed as skipped)
# PYTHON=PATH the interpreter the virtual environment is made with (default /usr/bin/python3, 3.11 or later)
set -eu

APP_USER=appliance
OPT_DIR=/opt/appliance
VENV=$OPT_DIR/venv
ETC_DIR=/etc/appliance
CONFIG=$ETC_DIR/appliance.toml
STATE_DIR=/var/lib/appliance
UNIT=/etc/systemd/system/appliance.service
RULES=/etc/udev/rules.d/60-appliance.rules

usage() {
    sed -n '2,/^set -eu/{/^set -eu/d; s/^# \{0,1\}//; p; }' "$0"
}

DRY_RUN=0
for arg in "$@"; do
    case $arg in
        --dry-run|-n) DRY_RUN=1 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "install.sh: unknown argument: $arg (try --help)" >&2; exit 2 ;;
    esac
done

DESTDIR=${DESTDIR:-}
DESTDIR=${DESTDIR%/}
PYTHON=${PYTHON:-/usr/bin/python3}
HERE=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)
SRC=$(dirname -- "$HERE")
# Root's umask may be 077: the service user must be able to read the program and its configuration directory.
umask 022

say() { printf '%s\n' "$*"; }
# Print a command, and run it unless this is a dry run.
run() {
    say "+ $*"
    if [ "$DRY_RUN" = 0 ]; then "$@"; fi
}
# Print a command that is not run, and why.
skip() {
    why=$1
    shift
    say "- skipped ($why): $*"
}
die() { say "install.sh: $*" >&2; exit 1; }

for f in pyproject.toml deploy/appliance.toml deploy/appliance.service; do
    [ -f "$SRC/$f" ] || die "$SRC is not a checkout of the appliance ($f is missing)"
done
if [ "$DRY_RUN" = 0 ] && [ -z "$DESTDIR" ] && [ "$(id -u)" != 0 ]; then
    die "run it as root (or with --dry-run to see what it would do)"
fi
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    if [ "$DRY_RUN" = 0 ]; then
        die "$PYTHON is missing or older than 3.11 (apt-get install python3 python3-venv; or set PYTHON=)"
    fi
    say "install.sh: warning: $PYTHON is missing or older than 3.11; a real run would stop here"
fi

if [ "$DRY_RUN" = 1 ]; then
    say "install.sh: dry run: the steps it would take; nothing is changed"
fi
say "install.sh: installing $SRC into ${DESTDIR:-/}"

udev_rules() {
    cat <<EOF
# Installed by the appliance's deploy/install.sh (a reinstall overwrites it; override it with a rule of your own).
# The service runs as user $APP_USER: its group may read PPS edges, steer and read PTP hardware clocks and drive
# GPIO lines, which udev otherwise leaves to root.  Serial ports belong to group dialout already.
SUBSYSTEM=="pps", GROUP="$APP_USER", MODE="0660"
SUBSYSTEM=="ptp", GROUP="$APP_USER", MODE="0660"
SUBSYSTEM=="gpio", KERNEL=="gpiochip[0-9]*", GROUP="$APP_USER", MODE="0660"
# cpu_latency_us: the PM QoS request the appliance holds while it runs (written, never read).
SUBSYSTEM=="misc", KERNEL=="cpu_dma_latency", GROUP="$APP_USER", MODE="0620"
EOF
}

# Owners: only in a real install (in a staged tree the user does not exist yet).
own() {
    if [ -n "$DESTDIR" ]; then return 0; fi
    printf '%s' "-o $1 -g $2"
}

say ""
say "1. system user and group $APP_USER"
if [ -n "$DESTDIR" ]; then
    skip DESTDIR groupadd --system $APP_USER
    skip DESTDIR useradd --system --gid $APP_USER --home-dir $STATE_DIR --no-create-home \
        --shell /usr/sbin/nologin --comment "time server appliance" $APP_USER
elif getent passwd $APP_USER >/dev/null 2>&1; then
    say "= user $APP_USER exists: kept"
else
    if ! getent group $APP_USER >/dev/null 2>&1; then
        run groupadd --system $APP_USER
    fi
    run useradd --system --gid $APP_USER --home-dir $STATE_DIR --no-create-home \
        --shell /usr/sbin/nologin --comment "time server appliance" $APP_USER
fi

say ""
say "2. state directory $STATE_DIR (learned clock state, audit trail, users, keys, certificate, control socket)"
# shellcheck disable=SC2046 # own prints separate words on purpose
run install -d -m 0750 $(own $APP_USER $APP_USER) "$DESTDIR$STATE_DIR"

say ""
say "3. program: virtual environment $VENV with this checkout installed"
if [ -x "$DESTDIR$VENV/bin/python" ]; then
    say "= $DESTDIR$VENV exists: kept (the program in it is reinstalled)"
else
    run install -d -m 0755 "$DESTDIR$OPT_DIR"
    say "+ $PYTHON -m venv $DESTDIR$VENV"
    if [ "$DRY_RUN" = 0 ] && ! "$PYTHON" -m venv "$DESTDIR$VENV"; then
        die "cannot make the virtual environment: apt-get install python3-venv, then run install.sh again"
    fi
fi
# A local directory is always reinstalled by pip, even at the same version: this is also the upgrade.  The NTP
# fast path (C) is built when a compiler and python3-dev are present; without them Python serves everything.  With
# libssl-dev (OpenSSL 3's libcrypto) it answers NTS requests too; without it Python answers those.
run "$DESTDIR$VENV/bin/pip" install --disable-pip-version-check "$SRC"

say ""
say "4. configuration $CONFIG"
run install -d -m 0755 "$DESTDIR$ETC_DIR"
if [ -e "$DESTDIR$CONFIG" ] || [ -L "$DESTDIR$CONFIG" ]; then
    say "= $DESTDIR$CONFIG exists: kept, never overwritten (the new default is $SRC/deploy/appliance.toml)"
else
    # shellcheck disable=SC2046
    run install -m 0640 $(own root $APP_USER) "$SRC/deploy/appliance.toml" "$DESTDIR$CONFIG"
fi

say ""
say "5. devices: group $APP_USER may use PPS sources, PTP hardware clocks and GPIO chips ($RULES)"
say "+ write $DESTDIR$RULES"
if [ "$DRY_RUN" = 1 ]; then
    udev_rules | sed 's/^/    | /'
else
    install -d -m 0755 "$DESTDIR$(dirname -- "$RULES")"
    udev_rules > "$DESTDIR$RULES.tmp"
    chmod 0644 "$DESTDIR$RULES.tmp"
    mv -f "$DESTDIR$RULES.tmp" "$DESTDIR$RULES"
fi
if [ -n "$DESTDIR" ]; then
    skip DESTDIR udevadm control --reload-rules
    skip DESTDIR udevadm trigger --action=change --subsystem-match=pps --subsystem-match=ptp --subsystem-match=gpio --subsystem-match=misc
elif [ "$DRY_RUN" = 1 ] || [ -S /run/udev/control ]; then
    run udevadm control --reload-rules
    run udevadm trigger --action=change --subsystem-match=pps --subsystem-match=ptp --subsystem-match=gpio --subsystem-match=misc
else
    skip "udev is not running" udevadm control --reload-rules
fi

say ""
say "6. systemd unit $UNIT"
run install -d -m 0755 "$DESTDIR$(dirname -- "$UNIT")"
run install -m 0644 "$SRC/deploy/appliance.service" "$DESTDIR$UNIT"
if [ -n "$DESTDIR" ]; then
    skip DESTDIR systemctl daemon-reload
elif [ "$DRY_RUN" = 1 ] || [ -d /run/systemd/system ]; then
    run systemctl daemon-reload
else
    skip "systemd is not running" systemctl daemon-reload
fi

APP="$VENV/bin/appliance"
say ""
if [ "$DRY_RUN" = 1 ]; then
    say "Dry run: nothing was changed. After a real run:"
else
    say "Installed; nothing was started. Next:"
fi
cat <<EOF

  1. Set the receiver and the outputs in $CONFIG (gnss.device, gnss.pps_device, ptp.interface, ...)
     and check it:
       sudo -u $APP_USER $APP check-config $CONFIG
  2. Stop any other time service: the appliance steers the system clock and serves port 123:
       systemctl disable --now chrony systemd-timesyncd ntpsec    # those that are installed
  3. Start it, now and at every boot, and follow its log:
       systemctl enable --now appliance
       journalctl -u appliance -f
  4. On its first start the console (https://<host>:8443/ by default) makes one user, admin; its password is in
       $STATE_DIR/initial-admin-password
     (readable by root and $APP_USER only). Log in and choose a new password when asked; the file is deleted then.
  5. Add users (always as $APP_USER, so the files in $STATE_DIR stay the service's):
       sudo -u $APP_USER $APP user add NAME --role admin --config $CONFIG
  6. Status, as $APP_USER or root (the control socket is $STATE_DIR/control.sock):
       sudo -u $APP_USER $APP status --config $CONFIG
EOF
