# Filters pip's stderr for scripts/setup.sh. A pip configuration that names a local index
# directory (extra-index-url = file:///opt/pypi/simple, in /etc/pip.conf,
# ~/.config/pip/pip.conf or PIP_EXTRA_INDEX_URL) makes pip warn once per requirement that
# directory does not hold, even when another index serves it: 50 to 114 lines of
# "WARNING: Location 'file:///...' is ignored: it is neither a file nor a directory."
# (issue 33, fresh user D). They are dropped here, and one line at the end says how many
# and which index roots they named; every other line passes unchanged.
/^WARNING: Location 'file:\/\/.*' is ignored: it is neither a file nor a directory\.$/ {
    n++
    url = $0
    sub(/^WARNING: Location '/, "", url)
    sub(/[^\/]+\/' is ignored: it is neither a file nor a directory\.$/, "", url)
    if (!(url in roots)) { roots[url] = 1; order[++k] = url }
    next
}
{ print; fflush() }
END {
    if (n) {
        list = ""
        for (i = 1; i <= k; i++) {
            dir = order[i]
            sub(/^file:\/\//, "", dir)
            gone = ""
            if (system("test -d '" dir "'") != 0) gone = " (does not exist)"
            if (i > 1) list = list ", "
            list = list order[i] gone
        }
        printf "setup.sh: hid %d pip warning(s): the local index directories in pip's configuration (extra-index-url) lack those packages: %s\n", n, list
    }
}
