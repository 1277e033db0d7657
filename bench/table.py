"""Shared helpers of the bench scripts' reports."""


def table(rows):
    """Prints rows as an aligned table; the first row is the header."""
    w = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for k, r in enumerate(rows):
        print(" | ".join(str(x).ljust(w[i]) if i == 0 else str(x).rjust(w[i]) for i, x in enumerate(r)))
        if k == 0:
            print("-+-".join("-" * x for x in w))
