"""A fake ``libnvidia-ml.so.1`` built from C at test time (see fake_nvml.c)."""
