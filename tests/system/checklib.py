"""checklib.py -- "[ok]: ..." and "[err]: ..." lines for the Python checkers
of tests/ (as lib.sh prints them for the shell tests); errors counts the
second kind."""

errors = 0


def ok(msg):
    print("[ok]: " + msg)


def err(msg, why):
    global errors
    errors += 1
    print("[err]: %s: %s" % (msg, why))
