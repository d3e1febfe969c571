#!/usr/bin/env bash
# Runs a command on a clean Debian 12 (bookworm) root file system, so that a missing install step
# fails here as it would on a newcomer's machine, and not only on a machine that happens to have
# the package installed by hand. CI runs `scripts/fresh-machine.sh make test` (.ci/run).
#
#   scripts/fresh-machine.sh                  # make test
#   scripts/fresh-machine.sh make demo        # any command, run from the checkout's root
#
# As root. Steps: build (once) a minimal Debian 12 with debootstrap from the mirror this machine's
# apt uses and cache it as a tarball; unpack a copy into a temporary directory; mount /proc, /sys,
# /dev and an empty /run; clone the committed HEAD of this repository into it (uncommitted changes
# are left out: commit first); chroot and run the command with a clean environment. The kernel is
# the host's, so network namespaces, XDP and AF_XDP work inside. Every exit path unmounts and
# removes the copy; the command's exit status is this script's.
#
# Environment: SLIP_FRESH_CACHE (default /var/cache/slipstream-fresh) holds the base tarball;
# delete it to rebuild. SLIP_FRESH_MIRROR overrides the Debian mirror found in apt's sources.
set -Eeuo pipefail

say() { echo "fresh-machine: $*"; }
die() { echo "fresh-machine: error: $*" >&2; exit 2; }

suite=bookworm
cache=${SLIP_FRESH_CACHE:-/var/cache/slipstream-fresh}
base=$cache/$suite-minbase.tar

[ "$(id -u)" = 0 ] || die "must run as root (debootstrap, chroot and mounts need it): sudo $0 $*"
top=$(cd "$(dirname "$0")/.." && pwd)
head=$(git -C "$top" rev-parse --verify -q HEAD) || die "$top is not a git checkout with a commit"
[ $# -gt 0 ] || set -- make test

# The Debian mirror of this machine's apt: deb822 sources (URIs:) first, then one-line sources.
# Security and updates suites are added from the same files below; this is the main archive.
find_mirror() {
    local f uri
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -r "$f" ] || continue
        uri=$(awk '$1 == "URIs:" && $2 !~ /security/ { print $2; exit }' "$f")
        [ -n "$uri" ] && { echo "$uri"; return; }
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -r "$f" ] || continue
        uri=$(awk '$1 == "deb" && $0 !~ /security/ { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; exit } }' "$f")
        [ -n "$uri" ] && { echo "$uri"; return; }
    done
}

find_security() {
    local f
    for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -r "$f" ] || continue
        awk '$1 == "URIs:" || $1 == "deb" {
                 for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\/.*debian-security/) { print $i; exit } }' "$f"
    done | head -n 1
}

build_base() {
    local mirror security tmp
    mirror=${SLIP_FRESH_MIRROR:-$(find_mirror)}
    [ -n "$mirror" ] || die "no Debian mirror found in /etc/apt/sources.list{,.d/} (set SLIP_FRESH_MIRROR=http://...)"
    if ! command -v debootstrap >/dev/null; then
        say "installing debootstrap (apt-get)"
        if ! { apt-get update -qq &&
               DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null; }; then
            die "could not install debootstrap with apt-get"
        fi
        command -v debootstrap >/dev/null || die "debootstrap is installed but not on PATH ($PATH)"
    fi
    tmp=$(mktemp -d "$cache/build.XXXXXX")
    building=$tmp
    say "building a minimal Debian 12 ($suite, minbase) from $mirror into the cache (once, a few minutes); log: $cache/debootstrap.log"
    if ! debootstrap --variant=minbase "$suite" "$tmp" "$mirror" >"$cache/debootstrap.log" 2>&1; then
        die "debootstrap failed, see $cache/debootstrap.log"
    fi
    # The apt sources a freshly installed Debian 12 has: the release, its updates, its security.
    security=$(find_security)
    rm -f "$tmp/etc/apt/sources.list"
    {
        printf 'Types: deb\nURIs: %s\nSuites: %s %s-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
            "$mirror" "$suite" "$suite"
        [ -z "$security" ] || printf '\nTypes: deb\nURIs: %s\nSuites: %s-security\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
            "$security" "$suite"
    } >"$tmp/etc/apt/sources.list.d/debian.sources"
    rm -rf "$tmp"/var/cache/apt/archives/*.deb "$tmp"/var/lib/apt/lists/*
    chmod 0755 "$tmp"
    tar -C "$tmp" -cf "$base.part" . && mv "$base.part" "$base"
    rm -rf --one-file-system "$tmp"
    building=
}

# Undo everything, whatever way we leave: stop what the command left running in the chroot, then
# unmount (lazily when busy) and delete; the same for a half-built base. --one-file-system keeps
# rm out of a mount that survived.
remove_tree() {
    local dir=$1 p m
    for p in /proc/[0-9]*; do
        [ "$(readlink "$p/root" 2>/dev/null)" = "$dir" ] && kill -KILL "${p#/proc/}" 2>/dev/null
    done
    for m in $(awk -v d="$dir" '$2 == d || index($2, d "/") == 1 { print $2 }' /proc/self/mounts | sort -r); do
        umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
    done
    if grep -q -e " $dir/" -e " $dir " /proc/self/mounts; then
        echo "fresh-machine: warning: mounts left under $dir, not deleting it" >&2
    else
        rm -rf --one-file-system "$dir"
    fi
}

cleanup() {
    local rc=$?
    trap - EXIT INT TERM HUP
    set +e
    [ -z "$building" ] || remove_tree "$building"
    [ -z "$root" ] || remove_tree "$root"
    exit "$rc"
}

# The whole run is one function, called and followed by exit on one line, so all of it is parsed
# before it starts: editing this file during a run (bash reads scripts as it goes) changes nothing.
main() {
    building='' root=''
    trap cleanup EXIT
    trap 'say "interrupted: stopping the command and cleaning up"; exit 130' INT
    trap 'say "terminated: stopping the command and cleaning up"; exit 143' TERM
    trap 'say "hung up: stopping the command and cleaning up"; exit 129' HUP
    # A failing step says where, instead of leaving only an exit status.
    trap 'echo "fresh-machine: error: line $LINENO failed: $BASH_COMMAND" >&2' ERR

    mkdir -p "$cache"
    # One builder at a time: a second run waits for the first's tarball instead of racing it.
    exec 9>"$cache/.lock"
    flock 9
    if [ ! -s "$base" ]; then
        build_base
    fi
    exec 9>&-

    root=$(mktemp -d /tmp/slipstream-fresh.XXXXXX)
    say "unpacking a clean Debian 12 into $root"
    # The root is a mount point, as / is on a real machine (`ip netns exec` remounts / as a
    # slave and fails on a plain directory), and private, so what the tests mount in there
    # stays in there.
    mount --bind "$root" "$root"
    mount --make-private "$root"
    tar -C "$root" -xf "$base"
    # It is /: 0755 as on any machine. mktemp made it 0700 (and a base cached from a mktemp
    # directory carries that as ./), which would lock every other user, nobody too, out of it.
    chmod 0755 "$root"
    cp /etc/resolv.conf "$root/etc/resolv.conf"
    mount -t proc proc "$root/proc"
    mount --rbind /sys "$root/sys" && mount --make-rslave "$root/sys"
    mount --rbind /dev "$root/dev" && mount --make-rslave "$root/dev"
    mount -t tmpfs -o mode=755 tmpfs "$root/run"

    dirty=$(git -C "$top" status --porcelain --untracked-files=no | wc -l)
    [ "$dirty" = 0 ] || say "note: $dirty uncommitted change(s) in $top are NOT in the copy"
    # Not under /root (0700): the tests run the build as nobody too (privilege checks, nginx
    # workers), which needs a checkout every user can reach, as any shared machine has.
    git clone -q --no-checkout "$top" "$root/srv/slipstream"
    git -C "$root/srv/slipstream" checkout -q --detach "$head"

    say "commit $(git -C "$top" log -1 --format='%h %s' "$head")"
    say "running on a clean Debian 12: $*"
    start=$(date +%s)
    trap - ERR      # the command's own failure is reported below, with its status
    set +e
    # A fresh Debian 12 lacks make, the one thing the README's two commands need before they can
    # install the rest (README: "apt-get install make"); nothing else is installed by hand.
    chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        /bin/bash -c 'set -e
            cd /srv/slipstream
            if ! command -v make >/dev/null; then
                echo "fresh-machine: apt-get install make (the README step before make demo/test)"
                apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq make >/dev/null
            fi
            exec "$@"' fresh "$@" <&0 &
    # In the background with wait: bash runs a trap only between commands, and wait is one it can
    # leave at once, so a TERM or Ctrl-C reaches cleanup while the command still runs.
    wait "$!"
    rc=$?
    set -e
    say "'$*' exited $rc after $(( $(date +%s) - start )) s on a clean Debian 12 (commit ${head:0:7})"
    return "$rc"
}

main "$@"; exit $?
