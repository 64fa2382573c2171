"""Stand-in for pip's get-pip.py, which ansible-test downloads from ci-files.testing.ansible.com (a host
CI cannot reach; ansible-test's own error says to save the script in its cache by hand). It does what
get-pip does with what is reachable: ensurepip, then pip installs the pip ansible-test pinned from the
package index. ansible-test runs it in the fresh venv it made, with its own arguments."""

import subprocess
import sys

GET_PIP_ONLY = {"--no-setuptools", "--no-wheel"}  # get-pip's own switches, not pip's
requested = [arg for arg in sys.argv[1:] if arg not in GET_PIP_ONLY]
subprocess.check_call([sys.executable, "-m", "ensurepip", "--upgrade", "--default-pip"])
subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", *requested])
