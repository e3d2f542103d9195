# debian-archive.sh -- find one exact version of a Debian package in any
# suite of the machine's Debian archive and download it, with the ordinary
# apt client and a private apt state: nothing in /etc or the system's apt
# state changes, no root needed. Sourced (not run) by upstream/fetch.sh (the
# Redis source package) and contrib/async-fork/scripts/fetch-kernel.sh (the
# linux-source-6.12 package).
#
# Debian serves only the newest version of a package in each suite, and moves
# suites on, so a pinned version is looked for in every suite that can carry
# it (the caller's list) at once.
#
# The sourcing script sets, before calling anything:
#   archive_tag     prefix of messages, e.g. "upstream/fetch"
#   archive_suites  suites to look in, e.g. "sid forky trixie-backports"
# and may set from the environment:
#   AFORK_APT_URI     archive URIs to use instead of the machine's (a file:
#                     URI is a local repository and is trusted unsigned)
#   AFORK_APT_SUITES  suites to use instead of archive_suites
#
# Functions: archive_die, archive_say, sha256_of, archive_open,
# archive_versions, archive_download. archive_open makes $archive_work (a
# temporary directory removed at exit); downloads land in $archive_work/dl.

archive_die() {
    printf '%s: %s\n' "$archive_tag" "$1" >&2
    shift
    for line in "$@"; do printf '  %s\n' "$line" >&2; done
    exit 1
}

archive_say() { printf '%s: %s\n' "$archive_tag" "$*" >&2; }

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

# Print the Debian archive URIs of the machine's apt sources (deb822 and
# one-line formats): main archives (".../debian") first, then security ones.
archive_machine_uris() {
    local f
    {
        for f in /etc/apt/sources.list.d/*.sources; do
            [ -r "$f" ] && awk 'tolower($1)=="uris:" { for (i = 2; i <= NF; i++) print $i }' "$f"
        done
        for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
            [ -r "$f" ] && sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$f" |
                awk '$1=="deb" || $1=="deb-src" { print $2 }'
        done
    } | sed 's:/*$::' | awk '!seen[$0]++' >"$archive_work/uris"
    grep -E '/debian$' "$archive_work/uris" || true
    grep -E '/debian-security$' "$archive_work/uris" || true
}

# Write one deb822 source per archive URI: a security archive gets the
# "-security" suites, any other the rest.
archive_write_sources() {
    local type=$1 uris=$2 uri suites keyring=/usr/share/keyrings/debian-archive-keyring.gpg
    local all=${AFORK_APT_SUITES:-$archive_suites} s
    for uri in $uris; do
        suites=
        for s in $all; do
            case $uri in
            *-security) [[ $s == *-security ]] && suites+=" $s" ;;
            *) [[ $s == *-security ]] || suites+=" $s" ;;
            esac
        done
        [ -n "$suites" ] || continue
        echo "Types: $type"
        echo "URIs: $uri"
        echo "Suites:$suites"
        echo "Components: main"
        case $uri in
        file:*) echo "Trusted: yes" ;;
        *) [ -f "$keyring" ] && echo "Signed-By: $keyring" ;;
        esac
        echo
    done
}

# archive_open TYPE: TYPE "deb" (binary packages) or "deb-src" (sources).
# Reads the index of every suite of every archive URI. Returns 2 when no
# index at all could be read (archive unreachable); a suite the archive does
# not have is only logged.
archive_open() {
    local type=$1 uris
    archive_work=$(mktemp -d "${TMPDIR:-/tmp}/afork-apt.XXXXXX")
    trap 'rm -rf "$archive_work"' EXIT
    mkdir -p "$archive_work/sources" "$archive_work/lists/partial" \
        "$archive_work/cache/archives/partial" "$archive_work/dl"
    uris=${AFORK_APT_URI:-$(archive_machine_uris)}
    [ -n "$uris" ] ||
        archive_die "no Debian archive URI found in /etc/apt/sources.list{,.d}." \
            "Set AFORK_APT_URI to a Debian archive URI."
    archive_uris_used=$(echo $uris)
    archive_write_sources "$type" "$uris" >"$archive_work/sources/afork.sources"
    archive_opts=(-o Dir::Etc::SourceList=/dev/null
                  -o Dir::Etc::SourceParts="$archive_work/sources"
                  -o Dir::State::Lists="$archive_work/lists"
                  -o Dir::Cache="$archive_work/cache"
                  -o Acquire::Languages=none
                  -o APT::Sandbox::User="$(id -un)"
                  -o Debug::NoLocking=1)
    archive_say "reading the index of $(echo ${AFORK_APT_SUITES:-$archive_suites}) from $archive_uris_used"
    apt-get "${archive_opts[@]}" update >"$archive_work/update.log" 2>&1 || true
    if ! ls "$archive_work/lists/"*Release >/dev/null 2>&1; then
        grep -E '^(E:|Err:|W:)' "$archive_work/update.log" | head -n 5 >&2
        return 2
    fi
}

# archive_versions PACKAGE: "VERSION SUITE" lines, one per suite carrying it,
# newest version first.
archive_versions() {
    apt-cache "${archive_opts[@]}" madison "$1" 2>/dev/null |
        awk -F' *[|] *' -v p="$1" '$1 ~ "^ *" p "$" {
            split($3, w, " "); split(w[2], s, "/"); print $2, s[1] }' |
        awk '!seen[$0]++' | sort -k1,1 -r -V
}

# archive_download PACKAGE VERSION: the binary package (type deb) or the
# source package's files (type deb-src) into $archive_work/dl.
archive_download() {
    local pkg=$1 version=$2 log=$archive_work/download.log what=download
    grep -q '^Types: deb-src' "$archive_work/sources/afork.sources" && what="source --download-only"
    archive_say "apt-get $what $pkg=$version"
    # shellcheck disable=SC2086
    if ! (cd "$archive_work/dl" && apt-get "${archive_opts[@]}" $what "$pkg=$version") \
        >"$log" 2>&1; then
        tail -n 5 "$log" >&2
        return 2
    fi
}
