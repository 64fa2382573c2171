"""`python -m dsv4deploy.watch`: the continuous verification's command on a host (its code: gates/watch.py).

Kept at this path because the units and supervisord programs the verify timer renders run it by this name,
including those already installed by earlier releases.
"""

from dsv4deploy.gates.watch import main

if __name__ == "__main__":
    raise SystemExit(main())
