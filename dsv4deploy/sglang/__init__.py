"""What dsv4deploy knows of SGLang itself: its releases, their flags, and the PD routers."""
